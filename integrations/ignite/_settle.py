"""Putting the record back in line with Ignite after an exception our handlers did not see. Nothing here raises."""

from __future__ import annotations

from tracker_core import Progress, StageProgress


def close_cut_batch(stage: StageProgress, samples: int) -> str:
    """End a batch left in flight, as Ignite counted it; return what was cut ("" if nothing)."""
    if not stage.view.batches.lifetime.in_flight:
        return ""
    index = stage.view.batches.epoch.ready - 1
    stage.batch_end(samples)
    return f"{stage.name} batch {index} cut by an exception (counted, as Ignite counts its iteration)"


def process_epoch(stage: StageProgress) -> None:
    """Mark the epoch in flight processed unless it already is."""
    epochs = stage.view.epochs.lifetime
    if epochs.in_flight and epochs.processed != epochs.started:
        stage.epoch_processed()


def process_run(progress: Progress) -> None:
    """Mark the run in flight processed unless it already is."""
    runs = progress.view.run.counts
    if runs.in_flight and runs.processed != runs.started:
        progress.run_processed()


def close_cut(stage: StageProgress, samples: int) -> str:
    """Close the batch and the epoch left in flight (the epoch as processed early); return what was cut."""
    cut = close_cut_batch(stage, samples)
    epochs = stage.view.epochs.lifetime
    if not epochs.in_flight:
        return cut
    ended = f"{stage.name} epoch {epochs.ready - 1} ended after {stage.view.batches.epoch.completed} batches"
    process_epoch(stage)
    stage.epoch_completed()
    return f"{cut}; {ended}" if cut else ended
