"""After ``load_state``, the trackers of ``accelerator.init_trackers`` continue at the checkpoint's step.

Accelerate logs at the ``step`` the loop passes to ``accelerator.log``; the adapter takes it to
be the optimizer steps taken (``progress.view.global_step``, counted after each step): a run
resumed at step N logs N + 1 first, and the interrupted process logged N + 1 and later too.
TensorBoard's own purge (``SessionLog.START`` at N + 1, what ``SummaryWriter(purge_step=N + 1)``
writes) makes its readers drop those. Any other tracker is named in one warning.
"""

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
