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
        name = type(tracker).__name__
        if not isinstance(tracker, TensorBoardTracker):
            left.append(f"{name} (the adapter cannot rewind it)")
            continue
        try:
            problem = rewind_summary_writer(tracker.writer, step + 1)
            if problem:
                left.append(f"{name} ({problem})")
        except Exception as error:  # the first law: a log never stops the training
            left.append(f"{name} ({type(error).__name__}: {error})")
    if left:
        warnings.warn(
            f"resumed at optimizer step {step}: the points these trackers got from the interrupted run after "
            f"step {step} stay, beside this run's: {'; '.join(left)}",
            UserWarning,
            stacklevel=3,
        )
