"""PyTorch Lightning adapter: the ``ProgressTracker`` callback and the ``ProgressDisplay`` progress bar, for
``pytorch_lightning`` and ``lightning.pytorch`` Trainers alike.

Add ``ProgressTracker()`` to ``Trainer(callbacks=[...])``; read progress anywhere with
``tracker_core.get_progress(trainer)``. See docs/lightning.md.
"""

from tracker_core.integrations._extra import require
from tracker_core.integrations.lightning._bases import installed

if not installed():
    require("pytorch_lightning", "lightning")  # raises, naming the extra to install

from tracker_core.integrations.lightning._callback import GRADIENTS_KEY, STATE_KEY, ProgressTracker
from tracker_core.integrations.lightning._display import ProgressDisplay

__all__ = ["GRADIENTS_KEY", "STATE_KEY", "ProgressDisplay", "ProgressTracker"]
