"""Count learning-rate scheduler steps from each torch scheduler's public ``last_epoch`` (one more at each
``step()``), read whenever the counts are: nothing on the scheduler is called, wrapped or written."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Sequence

from tracker_core.counting._stage import TrainStageProgress


def count_scheduler_steps(train: TrainStageProgress, schedulers: Sequence[object]) -> None:
    """From now on, count each step of the torch LR ``schedulers`` (the growth of its ``last_epoch``, held weakly)
    as a scheduler step of ``train``, instead of those counted until now (``[]`` stops counting). Call it once a
    checkpoint restored the schedulers (a load stops the counting). One without an ``int`` ``last_epoch`` (torch's
    ``ChainedScheduler``) is not counted: an anomaly names it, warned the first time."""
    counted = []
    for scheduler in {id(scheduler): scheduler for scheduler in schedulers}.values():
        if isinstance(getattr(scheduler, "last_epoch", None), int):
            counted.append([weakref.ref(scheduler), scheduler.last_epoch])  # type: ignore[attr-defined]
            continue
        message = f"the steps of a {type(scheduler).__name__} are not counted (no int last_epoch)"
        if message not in train._progress._anomalies:
            train._progress.note_anomaly(message)
            warnings.warn(f"tracker-core: {message}; noted in view.anomalies", RuntimeWarning, stacklevel=2)
    train._read_schedulers()  # what the schedulers counted until now stepped
    train._schedulers = counted
