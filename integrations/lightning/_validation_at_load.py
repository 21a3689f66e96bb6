"""A fit checkpoint saved inside a validation: the record follows what Lightning's resume does with that
validation."""

from __future__ import annotations

import warnings
from typing import Any

from tracker_core import InexactResumeWarning, Tracker
from tracker_core.adapter import reenter_evaluation_epoch


def validation_at_load(tracker: Tracker, restart: str, progress: dict[str, Any]) -> bool:
    """A fit checkpoint saved inside a validation: follow what Lightning does with that validation.

    Saved inside a validation batch (e.g. ``OnExceptionCheckpoint``), Lightning finishes the
    validation on resume, counting on from the batches done: so does the record. Saved after a
    validation batch, Lightning counts the validation as finished without running the rest: the
    record keeps the batches that ran, closes the validation, and says so. ``restart``: what Lightning does,
    ``"finish"`` or ``"skip"`` (read from the checkpoint's loops); "" for nothing to follow. True: it finishes it.
    """
    if not restart or not reenter_evaluation_epoch(tracker.progress, "validate", progress):
        return False
    if restart == "finish":
        return True  # Lightning finishes it: see warn_validation_reread
    validate = tracker.progress.validate
    validate.epoch_processed()
    validate.epoch_completed()
    done = tracker.view.validate.batches.epoch.completed
    message = (
        f"checkpoint saved during a validation after {done} of its batches: Lightning resumes training "
        "without running the rest of that validation (it counts it as finished); the record counts the "
        f"{done} batches that ran"
    )
    tracker.progress.note_anomaly(message)
    warnings.warn(message, InexactResumeWarning, stacklevel=2)
    return False


def warn_validation_reread(tracker: Tracker) -> None:
    """Loaded inside a validation batch: Lightning finishes that validation on resume, counting on from the
    batches done but re-reading its data from the first batch of its first loader (the record counts as it
    does). The caller puts the RNGs loaded now back when that validation ends."""
    message = (
        "resumed inside a validation batch: Lightning finishes that validation re-reading its data from the "
        "first batch of its first loader, so its batches and metrics differ from the uninterrupted run's; the "
        "training after it continues exactly only if that validation made no global random draw after the "
        "checkpoint in the uninterrupted run (its last loader's iterator was already built)"
    )
    tracker.progress.note_anomaly(message)
    warnings.warn(message, InexactResumeWarning, stacklevel=2)
