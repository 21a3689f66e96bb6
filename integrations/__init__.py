"""Framework adapters: ``tracker_core.integrations.lightning``, ``.ignite`` and ``.accelerate``."""
