"""Count learning-rate scheduler steps from each torch scheduler's own public count of them, ``last_epoch``
(one more at each ``step()``, ``SequentialLR``'s and ``ReduceLROnPlateau``'s too), whenever the counts are read
(the view, a save, a scope's start): nothing on the scheduler is called, wrapped or written, nothing read per batch.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Sequence

from tracker_core.counting._stage import TrainStageProgress


def count_scheduler_steps(train: TrainStageProgress, schedulers: Sequence[object]) -> None:
    """From now on, count each step of the torch LR ``schedulers`` (the growth of its ``last_epoch``) as a
    scheduler step of ``train``, instead of those counted until now (``[]`` stops counting).

    Call it once the schedulers' state is the one they step on from (after a checkpoint restored it): a load
    of the progress stops the counting, so a restored ``last_epoch`` is never read as steps. An object without
    an ``int`` ``last_epoch`` (torch's ``ChainedScheduler``, whose schedulers are private) is not counted: an
    anomaly names it, with a ``RuntimeWarning`` the first time. Held weakly: one dropped counts nothing more.
    """
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
