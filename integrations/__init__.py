"""Framework adapters for progress-tracker: Lightning, Ignite and Accelerate."""
