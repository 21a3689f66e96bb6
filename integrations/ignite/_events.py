"""Which Ignite event marks which progress phase, for a trainer and for evaluation engines.

The handlers are added with Ignite's ``add_event_handler`` when an engine is attached, so Ignite
calls them in the order handlers were added: after the user's handlers added before ``attach``,
before those added after it. A batch begins in an ITERATION_STARTED handler and ends in an
ITERATION_COMPLETED handler, both taking no arguments (Ignite then skips resolving its engine
weakref) and only bumping counters. A ``Checkpoint`` finds the record up to date in any order:
the handler's ``state_dict()`` first marks what the event Ignite is firing says happened
(:func:`settle_for_save`).

No handler holds its engine: the others take it as their argument (Ignite keeps a weak reference
for them), so an engine the user drops is freed at once, with the model its step function holds
(and a DDP model's process group, which ``destroy_process_group`` then stops).

No handler raises because of the order Ignite fires events in: an event that finds the
record elsewhere than expected (a batch or epoch cut by an exception, a handler attached
mid-run) puts the record in line with what Ignite counted and notes the anomaly (``_settle``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ignite.engine import Engine, Events

from tracker_core import EventOrderError, Progress, StageProgress, Tracker
from tracker_core.adapter import TokenCounter, samples_in
from tracker_core.integrations.ignite._loaders import Loaders
from tracker_core.integrations.ignite._settle import Anomalies, close_cut, close_cut_batch

CountTokens = Callable[[Any], "int | tuple[int, int]"]
Handler = Callable[[], None]
EngineHandler = Callable[[Engine], None]


def settle_for_save(engine: Engine, stage: StageProgress, loaders: Loaders | None) -> None:
    """Mark the phase the event Ignite is firing on ``engine`` says is over, before a checkpoint is taken.

    A ``Checkpoint`` added before ``attach`` runs ahead of the handler's own: on ITERATION_COMPLETED
    the step has run (its update is in the saved weights), so the batch is processed; on
    EPOCH_COMPLETED every batch of the epoch has, so the epoch is. Nothing else changes.
    """
    event = engine.last_event_name
    view = stage.view
    try:
        if event == Events.ITERATION_COMPLETED:
            batches = view.batches.lifetime
            if batches.in_flight and batches.processed == batches.completed:
                stage.batch_processed_of(engine.state.batch, _dataloader_index(loaders))
        elif event == Events.EPOCH_COMPLETED:
            epochs = view.epochs.lifetime
            if epochs.in_flight and epochs.processed != epochs.started and not view.batches.lifetime.in_flight:
                stage.epoch_processed()
    except EventOrderError:  # the record is elsewhere (an anomaly already noted): saved as it is
        pass


def _dataloader_index(loaders: Loaders | None) -> int:
    round_robin = loaders.round_robin if loaders is not None else None
    return 0 if round_robin is None else round_robin.last_index


def _batch_handlers(
    engine: Engine,
    stage: StageProgress,
    anomalies: Anomalies,
    count_tokens: CountTokens | None,
    loaders: Loaders | None,
) -> tuple[Handler, Handler, Handler]:
    """ITERATION_STARTED, ITERATION_COMPLETED and the batch part of TERMINATE."""
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

    def iteration_completed() -> None:
        ended = state.batch
        try:
            if loaders is None or loaders.round_robin is None:
                stage.batch_end_of(ended)  # its samples read in the same call
            else:  # several train loaders: count the batch to the one it came from
                stage.batch_end_of(ended, loaders.round_robin.last_index)
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
        anomalies.note(f"{stage.name} batch {state.iteration} ended without its ITERATION_STARTED (counted)")

    def batch_terminated() -> None:
        batches = stage.view.batches.lifetime
        if batches.ready != batches.completed and batches.processed == batches.completed:
            stage.cancel_batch()  # terminated from ITERATION_STARTED: the step never ran

    return iteration_started, iteration_completed, batch_terminated


def _epoch_handlers(
    stage: StageProgress, anomalies: Anomalies, begin: EngineHandler | None
) -> tuple[EngineHandler, EngineHandler, EngineHandler]:
    """EPOCH_STARTED, the epoch part of TERMINATE_SINGLE_EPOCH, and EPOCH_COMPLETED."""

    def epoch_started(engine: Engine) -> None:
        if begin is not None:
            begin(engine)
        try:
            stage.epoch_ready()
        except EventOrderError:
            anomalies.note(close_cut(stage, samples_in(engine.state.batch)) + "; a new epoch started")
            stage.epoch_ready()
        stage.epoch_started()

    def epoch_cut_short(engine: Engine) -> None:
        epochs = stage.view.epochs.lifetime
        if epochs.in_flight and epochs.processed != epochs.started:
            stage.epoch_processed()
        if engine.should_terminate_single_epoch == "skip_epoch_completed" and stage.view.epochs.lifetime.in_flight:
            stage.epoch_completed()

    def epoch_completed(engine: Engine) -> None:
        cut = close_cut_batch(stage, samples_in(engine.state.batch))
        if cut:  # an EXCEPTION_RAISED handler swallowed the exception: Ignite ended the epoch there
            anomalies.note(f"{cut}; Ignite ended the epoch early (an EXCEPTION_RAISED handler handled it)")
        epochs = stage.view.epochs.lifetime
        if not epochs.in_flight:
            anomalies.note(f"{stage.name} EPOCH_COMPLETED outside an epoch (ignored)")
            return
        if epochs.processed != epochs.started:  # else already processed by TERMINATE_SINGLE_EPOCH or a save
            stage.epoch_processed()
        stage.epoch_completed()

    return epoch_started, epoch_cut_short, epoch_completed


def _run_end_handlers(progress: Progress, owns_run: Callable[[], bool]) -> tuple[EngineHandler, Handler]:
    """The run part of TERMINATE, and COMPLETED."""

    def run_processed() -> None:
        runs = progress.view.run.counts
        if owns_run() and runs.in_flight and runs.processed != runs.started:
            progress.run_processed()

    def terminated(engine: Engine) -> None:
        if owns_run() and progress.view.run.counts.in_flight:
            progress.note_run_end("stopped_early")  # engine.terminate(): the run ends before max_epochs
        if engine.should_terminate == "skip_completed":  # Ignite fires no COMPLETED
            completed()
        else:
            run_processed()

    def completed() -> None:
        run_processed()
        runs = progress.view.run.counts
        if owns_run() and runs.completed != runs.processed:
            progress.run_completed()

    return terminated, completed


def _add_handlers(
    engine: Engine,
    stage: StageProgress,
    progress: Progress,
    anomalies: Anomalies,
    count_tokens: CountTokens | None,
    loaders: Loaders | None,
    started: EngineHandler,
    begin_epoch: EngineHandler | None,
    owns_run: Callable[[], bool],
) -> None:
    iteration_started, iteration_completed, batch_terminated = _batch_handlers(
        engine, stage, anomalies, count_tokens, loaders
    )
    epoch_started, epoch_cut_short, epoch_completed = _epoch_handlers(stage, anomalies, begin_epoch)
    run_terminated, completed = _run_end_handlers(progress, owns_run)

    def epoch_terminated(engine: Engine, iter_counter: int) -> None:  # Ignite passes the epoch's batch count
        batch_terminated()
        epoch_cut_short(engine)

    def terminated(engine: Engine) -> None:
        batch_terminated()
        run_terminated(engine)

    on = engine.add_event_handler
    on(Events.STARTED, started)
    on(Events.EPOCH_STARTED, epoch_started)
    on(Events.ITERATION_STARTED, iteration_started)
    on(Events.ITERATION_COMPLETED, iteration_completed)
    on(Events.TERMINATE_SINGLE_EPOCH, epoch_terminated)
    on(Events.EPOCH_COMPLETED, epoch_completed)
    on(Events.TERMINATE, terminated)
    on(Events.COMPLETED, completed)


def attach_trainer(
    engine: Engine,
    tracker: Tracker,
    loaders: Loaders,
    anomalies: Anomalies,
    started: EngineHandler,
    count_tokens: CountTokens | None = None,
    track_data: bool = True,
) -> None:
    """The trainer: STARTED begins the fit run (through ``started``), epochs and batches of ``train``.

    ``track_data``: hand the trainer's data to ``loaders`` at each EPOCH_STARTED (not where the
    engine positions its data itself, as ``DeterministicEngine`` does).
    """

    def begin_epoch(engine: Engine) -> None:
        loaders.track(engine.state.dataloader)  # set_data() may have handed over a new loader

    progress = tracker.progress
    _add_handlers(
        engine,
        progress.train,
        progress,
        anomalies,
        count_tokens,
        loaders,
        started,
        begin_epoch if track_data else None,
        lambda: True,
    )


def attach_stage(
    engine: Engine,
    progress: Progress,
    name: str,
    anomalies: Anomalies,
    count_tokens: CountTokens | None = None,
    before_start: Callable[[], object] | None = None,
) -> None:
    """An evaluation or inference engine: its epochs are ``name``'s; a run of its own when none is in flight.

    Ignite resets the engine's state every ``run()``; the counts live in ``progress``
    and so carry over runs. An epoch an exception cut is closed at the engine's next STARTED.
    ``before_start`` runs first at each STARTED.
    """
    stage = progress.stage(name)
    own = [False]

    def started(engine: Engine) -> None:
        if before_start is not None:
            before_start()
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

    _add_handlers(engine, stage, progress, anomalies, count_tokens, None, started, None, lambda: own[0])
