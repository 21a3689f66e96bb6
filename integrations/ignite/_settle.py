"""Putting the record back in line with Ignite when Ignite carried on in a way no event announced.

Ignite announces an exception only to ``Events.EXCEPTION_RAISED`` handlers, and registering
one would make Ignite swallow the exception, so the handler registers none. An exception
(handled by the user or not) therefore shows later, as an event that finds a batch or an
epoch still in flight. These functions close what was cut the way Ignite counted it, record
the anomaly in the progress and warn once; they never raise.
"""

from __future__ import annotations

import warnings

from tracker_core import Progress, StageProgress


class Anomalies:
    """Notes what the record could not follow in the progress (``view.anomalies``); the first one warns."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress
        self._warned = False

    def note(self, message: str) -> None:
        self._progress.note_anomaly(message)
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"tracker-core (Ignite): {message}; recorded in the progress (view.anomalies), "
                "further anomalies are recorded without a warning",
                RuntimeWarning,
                stacklevel=4,
            )


def close_cut_batch(stage: StageProgress, samples: int) -> str:
    """End a batch left in flight, as Ignite counted it (its ``iteration`` went up before ITERATION_STARTED).

    Returns what was cut ("" if nothing was in flight).
    """
    batches = stage.view.batches.lifetime
    if not batches.in_flight:
        return ""
    index = stage.view.batches.epoch.ready - 1
    stage.batch_end(samples)
    return f"{stage.name} batch {index} cut by an exception (counted, as Ignite counts its iteration)"


def close_cut_epoch(stage: StageProgress) -> str:
    """Close an epoch left in flight as processed early (Ignite goes on with its next epoch)."""
    epochs = stage.view.epochs.lifetime
    if not epochs.in_flight:
        return ""
    batches = stage.view.batches.epoch.completed
    if epochs.processed != epochs.started:
        stage.epoch_processed()
    stage.epoch_completed()
    return f"{stage.name} epoch {epochs.ready - 1} ended after {batches} batches"


def close_cut(stage: StageProgress, samples: int) -> str:
    """Close the batch and the epoch left in flight; return what was cut, "" if nothing."""
    return "; ".join(part for part in (close_cut_batch(stage, samples), close_cut_epoch(stage)) if part)
