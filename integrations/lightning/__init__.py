"""PyTorch Lightning adapter: the ``ProgressTracker`` callback and the ``ProgressDisplay`` progress bar.

Add ``ProgressTracker()`` to ``Trainer(callbacks=[...])``; read progress anywhere with
``tracker_core.get_progress(trainer)``. See docs/lightning.md.
"""

from tracker_core.integrations._extra import require

require("pytorch_lightning", "lightning")

from tracker_core.integrations.lightning._callback import GRADIENTS_KEY, STATE_KEY, ProgressTracker  # noqa: E402
from tracker_core.integrations.lightning._display import ProgressDisplay  # noqa: E402

__all__ = ["GRADIENTS_KEY", "STATE_KEY", "ProgressDisplay", "ProgressTracker"]
