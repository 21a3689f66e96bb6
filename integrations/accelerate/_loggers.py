"""``init_trackers``' trackers continue at the checkpoint's step (docs/accelerate.md, "Trackers after a resume")."""

from __future__ import annotations

import warnings
from typing import Any

from accelerate.tracking import TensorBoardTracker

from tracker_core.adapter import rewind_summary_writer


def rewind_trackers(accelerator: Any, step: int) -> None:
    """Rewind ``accelerator``'s started trackers to ``step`` (their points after it go); nothing raises."""
    left: list[str] = []
    for tracker in getattr(accelerator, "trackers", []):
        problem = "the adapter cannot rewind it"
        if isinstance(tracker, TensorBoardTracker):
            try:
                problem = rewind_summary_writer(tracker.writer, step + 1)
            except Exception as error:  # the first law: a log never stops the training
                problem = f"{type(error).__name__}: {error}"
        if problem:
            left.append(f"{type(tracker).__name__} ({problem})")
    if left:
        warnings.warn(
            f"resumed at optimizer step {step}: the points these trackers got from the interrupted run after "
            f"step {step} stay, beside this run's: {'; '.join(left)}",
            UserWarning,
            stacklevel=3,
        )
