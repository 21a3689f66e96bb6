"""The handlers that mark an engine's runs, epochs and batches (docs/ignite.md, "What is counted on which event"),
and what puts the record back in line after an exception they did not see. None holds its engine; none raises for
the order of Ignite's events (an anomaly is noted instead)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import partial
from typing import Any

from ignite.engine import Engine, Events

from tracker_core import EventOrderError, Progress, StageProgress
from tracker_core.adapter import TokenCounter, batches_in, samples_in
from tracker_core.integrations.ignite._loaders import Loaders, any_own_state

CountTokens = Callable[[Any], "int | tuple[int, int]"]
Handler = Callable[[], None]
Note = Callable[[str], None]  # notes an anomaly (view.anomalies), the first one warned


def settle_for_save(engine: Engine, stage: StageProgress, loaders: Loaders | None) -> bool:
    """Mark what the event Ignite is firing says is over, for a ``Checkpoint`` that runs ahead of our handlers:
    at ITERATION_COMPLETED the batch is processed (its step ran), at EPOCH_COMPLETED the epoch. True when the batch
    was the epoch's last and its data plain loaders read to their end (their length is Ignite's ``epoch_length``)."""
    view = stage.view
    with contextlib.suppress(EventOrderError):  # the record is elsewhere (an anomaly already noted): saved as it is
        if engine.last_event_name == Events.ITERATION_COMPLETED:
            batches = view.batches.lifetime
            if batches.in_flight and batches.processed == batches.completed:
                stage.batch_processed_of(engine.state.batch, _dataloader_index(loaders))
        elif engine.last_event_name == Events.EPOCH_COMPLETED and not view.batches.lifetime.in_flight:
            process_epoch(stage)
    length, data = engine.state.epoch_length, engine.state.dataloader
    if length is None or view.batches.lifetime.in_flight or view.batches.epoch.completed < length:
        return False
    return batches_in(data) == length and not any_own_state(data)


def _dataloader_index(loaders: Loaders | None) -> int:
    round_robin = loaders.round_robin if loaders is not None else None
    return 0 if round_robin is None else round_robin.last_index


def _add_batch_handlers(
    engine: Engine,
    stage: StageProgress,
    note: Note,
    count_tokens: CountTokens | None,
    loaders: Loaders | None,
) -> Handler:
    """Add ITERATION_STARTED and ITERATION_COMPLETED (no arguments: Ignite resolves no engine); return the batch
    part of TERMINATE."""
    state = engine.state
    tokens = TokenCounter(stage, count_tokens)

    def iteration_started() -> None:
        try:
            stage.batch_begin()
        except EventOrderError:
            begin_out_of_order()

    def begin_out_of_order() -> None:
        cut = close_cut_batch(stage, 0)  # the cut batch's data is gone: its samples are not counted
        if not stage.view.epochs.lifetime.in_flight:
            stage.epoch_ready()
            stage.epoch_started()
            cut = cut or f"{stage.name} batch began outside an epoch (an epoch was opened)"
        note(cut or f"{stage.name} batch began out of order")
        stage.batch_begin()

    def iteration_completed() -> None:
        ended = state.batch
        try:  # several train loaders: the batch counts to the one it came from
            stage.batch_end(samples_in(ended), _dataloader_index(loaders))
        except EventOrderError:
            end_out_of_order(ended)
        if type(ended) is not tokens.tokenless_type:  # most batches: no call
            tokens(ended)

    def end_out_of_order(ended: Any) -> None:
        batches = stage.view.batches.lifetime
        if batches.processed != batches.completed:  # processed by settle_for_save (a checkpoint ahead of us)
            stage.batch_completed()
            return
        if not stage.view.epochs.lifetime.in_flight:
            stage.epoch_ready()
            stage.epoch_started()
        stage.batch_begin()
        stage.batch_end(samples_in(ended), _dataloader_index(loaders))
        note(f"{stage.name} batch {state.iteration} ended without its ITERATION_STARTED (counted)")

    def batch_terminated() -> None:
        batches = stage.view.batches.lifetime
        if batches.ready != batches.completed and batches.processed == batches.completed:
            stage.cancel_batch()  # terminated from ITERATION_STARTED: the step never ran

    engine.add_event_handler(Events.ITERATION_STARTED, iteration_started)
    engine.add_event_handler(Events.ITERATION_COMPLETED, iteration_completed)
    return batch_terminated


def _add_epoch_handlers(
    engine: Engine, stage: StageProgress, note: Note, loaders: Loaders | None, batch_terminated: Handler
) -> None:
    """Add EPOCH_STARTED, TERMINATE_SINGLE_EPOCH and EPOCH_COMPLETED."""

    def epoch_started(engine: Engine) -> None:
        if loaders is not None:  # the trainer's data: set_data() may have handed over a new loader
            loaders.track(engine.state.dataloader)
        try:
            stage.epoch_ready()
        except EventOrderError:
            note(close_cut(stage, samples_in(engine.state.batch)) + "; a new epoch started")
            stage.epoch_ready()
        stage.epoch_started()

    def epoch_terminated(engine: Engine, iter_counter: int) -> None:  # Ignite passes the epoch's batch count
        batch_terminated()
        process_epoch(stage)
        if engine.should_terminate_single_epoch == "skip_epoch_completed" and stage.view.epochs.lifetime.in_flight:
            stage.epoch_completed()

    def epoch_completed(engine: Engine) -> None:
        cut = close_cut_batch(stage, samples_in(engine.state.batch))
        if cut:  # an EXCEPTION_RAISED handler swallowed the exception: Ignite ended the epoch there
            note(f"{cut}; Ignite ended the epoch early (an EXCEPTION_RAISED handler handled it)")
        if not stage.view.epochs.lifetime.in_flight:
            note(f"{stage.name} EPOCH_COMPLETED outside an epoch (ignored)")
            return
        process_epoch(stage)  # unless TERMINATE_SINGLE_EPOCH or a save did
        stage.epoch_completed()

    engine.add_event_handler(Events.EPOCH_STARTED, epoch_started)
    engine.add_event_handler(Events.TERMINATE_SINGLE_EPOCH, epoch_terminated)
    engine.add_event_handler(Events.EPOCH_COMPLETED, epoch_completed)


def _add_run_end_handlers(
    engine: Engine, progress: Progress, owns_run: Callable[[], bool], batch_terminated: Handler
) -> None:
    """Add TERMINATE and COMPLETED."""

    def terminated(engine: Engine) -> None:
        batch_terminated()
        state = engine.state
        reached = state.max_iters is not None and state.iteration >= state.max_iters  # Ignite's own TERMINATE
        if owns_run() and progress.view.run.counts.in_flight and not reached:
            progress.note_run_end("stopped_early")  # engine.terminate(): the run ends before its limit
        if engine.should_terminate == "skip_completed":  # Ignite fires no COMPLETED
            completed()
        elif owns_run():
            process_run(progress)

    def completed() -> None:
        if owns_run():
            process_run(progress)
            runs = progress.view.run.counts
            if runs.completed != runs.processed:
                progress.run_completed()

    engine.add_event_handler(Events.TERMINATE, terminated)
    engine.add_event_handler(Events.COMPLETED, completed)


def add_handlers(
    engine: Engine,
    stage: StageProgress,
    *,
    progress: Progress,
    count_tokens: CountTokens | None,
    started: Callable[[Engine], None],
    loaders: Loaders | None = None,
    owns_run: Callable[[], bool] = lambda: True,
) -> None:
    """Add the handlers recording ``engine`` as ``stage``: ``started`` (it begins the run) at STARTED; ``loaders``:
    the trainer's data, tracked at each EPOCH_STARTED (None: none); ``owns_run()``: the run in flight is this
    engine's (default: always, the trainer's)."""
    engine.add_event_handler(Events.STARTED, started)
    note = partial(progress.note_anomaly, framework="Ignite")
    batch_terminated = _add_batch_handlers(engine, stage, note, count_tokens, loaders)
    _add_epoch_handlers(engine, stage, note, loaders, batch_terminated)
    _add_run_end_handlers(engine, progress, owns_run, batch_terminated)


def attach_stage(
    engine: Engine,
    progress: Progress,
    name: str,
    count_tokens: CountTokens | None = None,
    before_start: Callable[[], object] | None = None,
) -> None:
    """An evaluation or inference engine: its epochs are ``name``'s, in a run of its own when none is in flight;
    what an exception cut is closed at its next STARTED, after ``before_start()``."""
    stage = progress.stage(name)
    own = [-1]  # the lifetime number (runs ready) of the last run this engine began of its own; -1: none

    def owns_run() -> bool:
        return own[0] == progress.view.run.counts.ready

    def started(engine: Engine) -> None:
        if before_start is not None:
            before_start()
        cut = close_cut(stage, samples_in(engine.state.batch))
        if owns_run() and progress.view.run.counts.in_flight:  # this engine's own run, cut by an exception
            process_run(progress)
            progress.run_completed()
            cut = f"{cut}; the {name} run was cut" if cut else f"the {name} run was cut"
        if cut:
            progress.note_anomaly(f"{cut} (by an exception, seen at the next run)", framework="Ignite")
        length, iteration = engine.state.epoch_length, engine.state.iteration
        if length and iteration % length:  # its state was loaded mid-epoch (e.g. from Checkpoint's to_save)
            progress.note_anomaly(
                f"the {name} engine continues its loaded state at iteration {iteration}: this {name} epoch counts "
                f"only the batches it runs, not its first {iteration % length} (leave evaluators out of to_save)",
                framework="Ignite",
            )
        if not progress.view.run.counts.in_flight:  # else inside another engine's run (a fit's)
            progress.run_ready(name)
            progress.run_started()
            own[0] = progress.view.run.counts.ready

    add_handlers(
        engine,
        stage,
        progress=progress,
        count_tokens=count_tokens,
        started=started,
        owns_run=owns_run,
    )


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
