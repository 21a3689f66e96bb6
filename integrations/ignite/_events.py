"""Which Ignite event marks which progress phase, for a trainer and for evaluation engines.

Each handler is put first in its event's list, so the progress is up to date when the
user's handlers (a ``Checkpoint`` among them) run. The per-batch handlers take no
arguments (Ignite then skips resolving its engine weakref) and only bump counters.
"""

from __future__ import annotations

from collections.abc import Callable

from ignite.engine import Engine, Events

from tracker_core import Progress, Tracker
from tracker_core.adapter import StageProgress, samples_in
from tracker_core.integrations.ignite._compat import prepend_handler


def _attach_batches(engine: Engine, stage: StageProgress) -> None:
    state = engine.state

    def iteration_started() -> None:
        stage.batch_begin()

    def iteration_completed() -> None:
        stage.batch_end(samples_in(state.batch))

    def terminated() -> None:
        batches = stage.view.batches.lifetime
        if batches.ready != batches.completed and batches.processed == batches.completed:
            stage.cancel_batch()  # terminated from ITERATION_STARTED: the step never ran

    prepend_handler(engine, Events.ITERATION_STARTED, iteration_started)
    prepend_handler(engine, Events.ITERATION_COMPLETED, iteration_completed)
    prepend_handler(engine, Events.TERMINATE, terminated)
    prepend_handler(engine, Events.TERMINATE_SINGLE_EPOCH, lambda iter_counter: terminated())


def _attach_epochs(engine: Engine, stage: StageProgress, begin: Callable[[], None] | None = None) -> None:

    def epoch_started() -> None:
        if begin is not None:
            begin()
        stage.epoch_ready()
        stage.epoch_started()

    def epoch_cut_short(iter_counter: int) -> None:  # Ignite passes the epoch's batch count
        stage.epoch_processed()
        if engine.should_terminate_single_epoch == "skip_epoch_completed":
            stage.epoch_completed()

    def epoch_completed() -> None:
        epochs = stage.view.epochs.lifetime
        if epochs.processed == epochs.started:
            stage.epoch_completed()  # already processed by TERMINATE_SINGLE_EPOCH
            return
        stage.epoch_processed()
        stage.epoch_completed()

    prepend_handler(engine, Events.EPOCH_STARTED, epoch_started)
    prepend_handler(engine, Events.TERMINATE_SINGLE_EPOCH, epoch_cut_short)
    prepend_handler(engine, Events.EPOCH_COMPLETED, epoch_completed)


def _attach_run_end(engine: Engine, progress: Progress, owns_run: Callable[[], bool]) -> None:

    def run_processed() -> None:
        runs = progress.view.run.counts
        if owns_run() and runs.processed != runs.started:
            progress.run_processed()

    def terminated() -> None:
        run_processed()
        if owns_run() and engine.should_terminate == "skip_completed":
            progress.run_completed()

    def completed() -> None:
        run_processed()
        runs = progress.view.run.counts
        if owns_run() and runs.completed != runs.processed:
            progress.run_completed()

    prepend_handler(engine, Events.TERMINATE, terminated)
    prepend_handler(engine, Events.COMPLETED, completed)


def attach_trainer(engine: Engine, tracker: Tracker, started: Callable[[Engine], None]) -> None:
    """The trainer: STARTED begins the fit run (through ``started``), epochs and batches of ``train``."""
    progress = tracker.progress

    def begin_epoch() -> None:
        loader = engine.state.dataloader
        if loader is not None:
            tracker.track_train_loader(loader)  # set_data() may have handed over a new loader

    _attach_run_end(engine, progress, lambda: True)
    _attach_epochs(engine, progress.train, begin_epoch)
    _attach_batches(engine, progress.train)
    prepend_handler(engine, Events.STARTED, started)


def attach_stage(engine: Engine, progress: Progress, name: str) -> None:
    """An evaluation or inference engine: its epochs are ``name``'s; a run of its own when none is in flight.

    Ignite resets the engine's state every ``run()``; the counts live in ``progress``
    and so carry over runs.
    """
    stage = progress.stage(name)
    own = [False]

    def started() -> None:
        own[0] = not progress.view.run.counts.in_flight
        if own[0]:
            progress.run_ready(name)
            progress.run_started()

    def owns_run() -> bool:
        return own[0]

    _attach_run_end(engine, progress, owns_run)
    _attach_epochs(engine, stage)
    _attach_batches(engine, stage)
    prepend_handler(engine, Events.STARTED, started)
