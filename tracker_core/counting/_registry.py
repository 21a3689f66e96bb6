"""The common accessor: which Progress belongs to a Trainer, an Engine or an Accelerator."""

from __future__ import annotations

from weakref import WeakKeyDictionary

from tracker_core.counting._progress import Progress
from tracker_core.counting._view import ProgressView

_progress_of: WeakKeyDictionary[object, Progress] = WeakKeyDictionary()


def register_progress(owner: object, progress: Progress) -> None:
    """Make ``get_progress(owner)`` return ``progress``'s view (called by adapters)."""
    _progress_of[owner] = progress


def get_progress(owner: object) -> ProgressView:
    """The read-only progress of a Lightning Trainer, an Ignite Engine or an Accelerator."""
    try:
        return _progress_of[owner].view
    except (KeyError, TypeError):
        raise LookupError(
            f"no progress tracker is attached to this {type(owner).__name__}; "
            "add tracker-core's adapter for its framework first"
        ) from None
