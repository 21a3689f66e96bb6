"""Re-synchronise a Progress with a framework's counters where its hooks cannot say what happened."""

from __future__ import annotations

from typing import Any

from tracker_core.counting._progress import Progress
from tracker_core.counting._stage import StageProgress

# Where a run scope began: its epochs' and batches' bases, then each kind of tally's (StageProgress._tally_kinds).
RunScope = tuple[int, int, tuple[tuple[int, ...], ...]]


def abandon_in_flight(progress: Progress, *, reenter: bool) -> str:
    """An exception ended the current run: close what was in flight; return what was cut ("" if nothing).
    A processed batch counts as completed, an unprocessed one is undone, an unfinished epoch is dropped. With
    ``reenter`` (Lightning's fit loop continues its counters) the next ``run_ready`` of that kind re-enters the run."""
    cut: list[str] = []
    for stage in progress._stages():
        batches, epochs = stage._batches, stage._epochs
        if batches.processed != batches.completed:
            batches.set_all(batches.processed)
        elif batches.ready != batches.completed:
            cut.append(f"{stage.name} batch {batches.ready - batches.epoch_base - 1} (not processed)")
            batches.set_all(batches.completed)
        if epochs.ready != epochs.completed:
            cut.append(f"{stage.name} epoch after {batches.completed - batches.epoch_base} batches")
            epochs.set_all(epochs.completed)
        stage._resuming_epoch = False
    runs = progress._runs
    if runs.ready != runs.completed:
        runs.set_all(runs.ready)
        progress._resuming_run = False
        if reenter:
            reenter_last_run(progress, progress._run_kind)
        cut.append(f"{progress._run_kind} run")
    if cut:  # "where" named an event that is no longer in flight: name the run instead
        progress._where = ("", "run", "started" if runs.ready != runs.completed else "completed")
    return ", ".join(cut)


def reenter_last_run(progress: Progress, kind: str) -> bool:
    """The framework continues its last run of ``kind``: re-open it, so the next ``run_ready(kind)`` and
    ``run_started`` count nothing and its run scope continues. False, changing nothing, if the last run differs."""
    runs = progress._runs
    if progress._run_kind != kind or runs.ready == 0:
        return False
    if runs.ready == runs.completed:
        runs.started = runs.ready
        runs.processed = runs.completed = runs.ready - 1
    progress._resuming_run = True
    return True


def reenter_evaluation_epoch(progress: Progress, stage: str, state: dict[str, Any]) -> bool:
    """After ``load_state_dict(state)``: continue the unfinished evaluation epoch of ``stage`` (Lightning carries on
    its counts): its processed batches come back, the next ``epoch_ready``/``epoch_started`` count nothing.
    False, changing nothing, if ``state`` had no unfinished epoch of ``stage``."""
    saved = state["stages"][stage]
    epochs, batches = saved["epochs"]["lifetime"], saved["batches"]["lifetime"]
    if epochs["ready"] == epochs["completed"] or epochs["processed"] != epochs["completed"]:
        return False  # no epoch in flight, or one whose batches were all done (the load counts it)
    target = progress.stage(stage)
    target._batches.set_all(batches["processed"])
    target._epochs.set_all(epochs["completed"])
    target._epochs.ready = target._epochs.started = epochs["ready"]
    target._resuming_epoch = True
    target._samples.total = saved["samples"]["lifetime"]
    for tallies, counts in zip(target._dataloaders, saved["dataloaders"], strict=True):
        tallies.batches.total = counts["batches"]["lifetime"]
        tallies.samples.total = counts["samples"]["lifetime"]
    progress._where = (stage, "epoch", "started")
    return True


def continue_run_scope(stage: StageProgress, bases: RunScope | None = None) -> RunScope:
    """Where the current run scope of ``stage`` begins (opaque), after continuing it from ``bases``, an earlier
    return of this function (Lightning: a fit after validate/test/predict carries on its fit counters). Call it
    right after ``run_ready``; tallies that did not exist then (a new dataloader or optimizer) count from zero."""
    kinds = stage._tally_kinds()
    if bases is not None:
        stage._epochs.run_base, stage._batches.run_base, kind_bases = bases
        for kind, saved in zip(kinds, kind_bases, strict=True):
            for index, tally in enumerate(kind):
                tally.run_base = saved[index] if index < len(saved) else 0
    return stage._epochs.run_base, stage._batches.run_base, tuple(tuple(t.run_base for t in kind) for kind in kinds)
