"""Which Ignite event marks which progress phase, for a trainer and for evaluation engines.

Each handler is put first in its event's list, so the progress is up to date when the
user's handlers (a ``Checkpoint`` among them) run. A batch begins in an ITERATION_STARTED
handler that takes no arguments (Ignite then skips resolving its engine weakref); it ends
when the engine's step returns, right before Ignite fires ITERATION_COMPLETED (the step is
wrapped: one handler call of Ignite's less per batch, its largest per-batch cost). Both only
bump counters.

No handler raises because of the order Ignite fires events in: an event that finds the
record elsewhere than expected (a batch or epoch cut by an exception that a user's
``EXCEPTION_RAISED`` handler swallowed, a handler attached mid-run) puts the record in line
with what Ignite counted and notes the anomaly (``_settle``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ignite.engine import Engine, Events

from tracker_core import EventOrderError, Progress, Tracker
from tracker_core.adapter import StageProgress, TokenCounter, samples_in
from tracker_core.integrations.ignite._compat import (
    ProcessFunction,
    on_exception_leaving,
    prepend_handler,
    wrap_process_function,
)
from tracker_core.integrations.ignite._loaders import Loaders
from tracker_core.integrations.ignite._settle import Anomalies, close_cut, close_cut_batch

CountTokens = Callable[[Any], "int | tuple[int, int]"]


def _attach_batches(
    engine: Engine,
    stage: StageProgress,
    anomalies: Anomalies,
    count_tokens: CountTokens | None,
    loaders: Loaders | None = None,
) -> None:
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
        anomalies.note(cut or f"{stage.name} batch began out of order")
        stage.batch_begin()

    def ending_batches(process: ProcessFunction) -> ProcessFunction:
        def process_then_end_batch(running: Engine, batch: Any) -> Any:
            output = process(running, batch)  # the user's step sees its batch in flight
            ended = state.batch  # as ITERATION_COMPLETED would find it
            try:
                if loaders is None or loaders.round_robin is None:
                    stage.batch_end_of(ended)  # its samples read in the same call
                else:  # several train loaders: count the batch to the one it came from
                    stage.batch_end_of(ended, loaders.round_robin.last_index)
            except EventOrderError:
                end_out_of_order()
            if type(ended) is not tokens.tokenless_type:  # most batches: no call
                tokens(ended)
            return output

        return process_then_end_batch

    def end_out_of_order() -> None:
        if not stage.view.epochs.lifetime.in_flight:
            stage.epoch_ready()
            stage.epoch_started()
        stage.batch_begin()
        stage.batch_end(samples_in(state.batch))
        anomalies.note(f"{stage.name} batch {state.iteration} ended without its ITERATION_STARTED (counted)")

    def terminated() -> None:
        batches = stage.view.batches.lifetime
        if batches.ready != batches.completed and batches.processed == batches.completed:
            stage.cancel_batch()  # terminated from ITERATION_STARTED: the step never ran

    prepend_handler(engine, Events.ITERATION_STARTED, iteration_started)
    wrap_process_function(engine, ending_batches)  # as ITERATION_COMPLETED's first handler, without its call
    prepend_handler(engine, Events.TERMINATE, terminated)
    prepend_handler(engine, Events.TERMINATE_SINGLE_EPOCH, lambda iter_counter: terminated())


def _attach_epochs(
    engine: Engine, stage: StageProgress, anomalies: Anomalies, begin: Callable[[], None] | None = None
) -> None:
    state = engine.state

    def epoch_started() -> None:
        if begin is not None:
            begin()
        try:
            stage.epoch_ready()
        except EventOrderError:
            anomalies.note(close_cut(stage, samples_in(state.batch)) + "; a new epoch started")
            stage.epoch_ready()
        stage.epoch_started()

    def epoch_cut_short(iter_counter: int) -> None:  # Ignite passes the epoch's batch count
        epochs = stage.view.epochs.lifetime
        if epochs.in_flight and epochs.processed != epochs.started:
            stage.epoch_processed()
        if engine.should_terminate_single_epoch == "skip_epoch_completed" and stage.view.epochs.lifetime.in_flight:
            stage.epoch_completed()

    def epoch_completed() -> None:
        cut = close_cut_batch(stage, samples_in(state.batch))
        if cut:  # an EXCEPTION_RAISED handler swallowed the exception: Ignite ended the epoch there
            anomalies.note(f"{cut}; Ignite ended the epoch early (an EXCEPTION_RAISED handler handled it)")
        epochs = stage.view.epochs.lifetime
        if not epochs.in_flight:
            anomalies.note(f"{stage.name} EPOCH_COMPLETED outside an epoch (ignored)")
            return
        if epochs.processed != epochs.started:  # else already processed by TERMINATE_SINGLE_EPOCH
            stage.epoch_processed()
        stage.epoch_completed()

    prepend_handler(engine, Events.EPOCH_STARTED, epoch_started)
    prepend_handler(engine, Events.TERMINATE_SINGLE_EPOCH, epoch_cut_short)
    prepend_handler(engine, Events.EPOCH_COMPLETED, epoch_completed)


def _attach_run_end(engine: Engine, progress: Progress, owns_run: Callable[[], bool]) -> None:

    def run_processed() -> None:
        runs = progress.view.run.counts
        if owns_run() and runs.in_flight and runs.processed != runs.started:
            progress.run_processed()

    def terminated() -> None:
        if owns_run() and progress.view.run.counts.in_flight:
            progress.note_run_end("stopped_early")  # engine.terminate(): the run ends before max_epochs
        run_processed()
        runs = progress.view.run.counts
        if owns_run() and engine.should_terminate == "skip_completed" and runs.completed != runs.processed:
            progress.run_completed()

    def completed() -> None:
        run_processed()
        runs = progress.view.run.counts
        if owns_run() and runs.completed != runs.processed:
            progress.run_completed()

    prepend_handler(engine, Events.TERMINATE, terminated)
    prepend_handler(engine, Events.COMPLETED, completed)


def attach_trainer(
    engine: Engine,
    tracker: Tracker,
    loaders: Loaders,
    anomalies: Anomalies,
    started: Callable[[Engine], None],
    count_tokens: CountTokens | None = None,
) -> None:
    """The trainer: STARTED begins the fit run (through ``started``), epochs and batches of ``train``."""
    progress = tracker.progress

    def begin_epoch() -> None:
        loaders.track(engine.state.dataloader)  # set_data() may have handed over a new loader

    def ended_by(exception: BaseException) -> None:
        progress.note_run_end("interrupted" if isinstance(exception, KeyboardInterrupt) else "crashed")

    _attach_run_end(engine, progress, lambda: True)
    on_exception_leaving(engine, ended_by)
    _attach_epochs(engine, progress.train, anomalies, begin_epoch)
    _attach_batches(engine, progress.train, anomalies, count_tokens, loaders)
    prepend_handler(engine, Events.STARTED, started)


def attach_stage(
    engine: Engine, progress: Progress, name: str, anomalies: Anomalies, count_tokens: CountTokens | None = None
) -> None:
    """An evaluation or inference engine: its epochs are ``name``'s; a run of its own when none is in flight.

    Ignite resets the engine's state every ``run()``; the counts live in ``progress``
    and so carry over runs. An epoch an exception cut is closed at the engine's next STARTED.
    """
    stage = progress.stage(name)
    own = [False]

    def started() -> None:
        cut = close_cut(stage, samples_in(engine.state.batch))
        runs = progress.view.run.counts
        if own[0] and runs.in_flight:  # this engine's own run, cut by an exception
            if runs.processed != runs.started:
                progress.run_processed()
            progress.run_completed()
            cut = f"{cut}; the {name} run was cut" if cut else f"the {name} run was cut"
        if cut:
            anomalies.note(f"{cut} (by an exception, seen at the next run)")
        own[0] = not progress.view.run.counts.in_flight
        if own[0]:
            progress.run_ready(name)
            progress.run_started()

    def owns_run() -> bool:
        return own[0]

    _attach_run_end(engine, progress, owns_run)
    _attach_epochs(engine, stage, anomalies)
    _attach_batches(engine, stage, anomalies, count_tokens)
    prepend_handler(engine, Events.STARTED, started)
