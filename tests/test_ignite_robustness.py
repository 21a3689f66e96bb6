"""The handler is a passenger: Ignite runs as it would without it, and the view follows engine.state.

Each test drives a real Ignite Engine through something the adapter did not order
(interrupt, run() again, exceptions, odd loaders, pickling), with the oracle of
tests/helpers/ignite_oracle.py checking the view against engine.state at every event.
"""

from __future__ import annotations

import copy
import gc
import io
import pickle
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ignite")

import torch
from ignite.engine import Engine, Events
from torch.utils.data import DataLoader

from tracker_core import InexactResumeWarning, PhaseCounts
from tracker_core.integrations.ignite import ProgressDisplay, ProgressHandler

from helpers.ignite_oracle import Oracle
from helpers.ignite_program import (
    EPOCHS,
    TRAIN_SIZE,
    VAL_SIZE,
    Config,
    Indexed,
    Program,
    build,
    resume,
    save_every_iteration,
)

PER_EPOCH = 4  # 10 samples, batch 3


class Boom(RuntimeError):
    """The exception the tests inject into a training step."""


def _checked(program: Program) -> Oracle:
    return Oracle(program.progress, program.trainer, [program.optimizer], {"validate": program.evaluator})


def _raise_at(program: Program, iteration: int) -> None:
    """Make the training step of ``iteration`` raise Boom (once)."""
    step = program.trainer._process_function

    def failing(engine: Engine, batch: Any) -> Any:
        if engine.state.iteration == iteration and not failing.raised:  # type: ignore[attr-defined]
            failing.raised = True  # type: ignore[attr-defined]
            raise Boom(f"step {iteration}")
        return step(engine, batch)

    failing.raised = False  # type: ignore[attr-defined]
    program.trainer._process_function = failing


def _iterations_without_the_handler(fail_at: int) -> tuple[int, int]:
    """(iteration, epoch) a plain Engine reaches when its step ``fail_at`` raises and a handler swallows it."""

    def step(engine: Engine, batch: Any) -> None:
        if engine.state.iteration == fail_at:
            raise Boom(f"step {fail_at}")

    trainer = Engine(step)
    trainer.add_event_handler(Events.EXCEPTION_RAISED, lambda engine, error: None)
    trainer.run(DataLoader(Indexed(TRAIN_SIZE), batch_size=3), max_epochs=EPOCHS)
    return trainer.state.iteration, trainer.state.epoch


# interrupt and run() again -------------------------------------------------------------------
def test_interrupt_then_run_continues_the_fit_run_with_the_view_following_engine_state() -> None:
    program = build(Config(), seed=0)
    oracle = _checked(program)
    program.trainer.add_event_handler(Events.ITERATION_COMPLETED(every=5), program.trainer.interrupt)
    program.run()
    program.run()
    assert program.trainer.state.iteration == 10 and program.progress.view.run.counts.in_flight
    program.run()
    assert program.trainer.state.iteration == EPOCHS * PER_EPOCH
    assert oracle.disagreements == [] and oracle.checks > 50
    assert program.progress.view.run.counts == PhaseCounts(1, 1, 1, 1)


def test_run_again_after_completion_with_the_same_max_epochs_is_a_new_fit_run_as_ignite_begins_anew() -> None:
    program = build(Config(), seed=0)
    oracle = _checked(program)
    program.run()
    program.run()
    assert oracle.disagreements == []
    view = program.progress.view
    assert view.run.counts == PhaseCounts(2, 2, 2, 2)
    assert view.train.batches.run.completed == program.trainer.state.iteration == EPOCHS * PER_EPOCH
    assert view.train.batches.lifetime.completed == 2 * EPOCHS * PER_EPOCH


def test_run_again_after_completion_with_more_epochs_continues_the_fit_run_like_ignites_state() -> None:
    program = build(Config(), seed=0)
    oracle = _checked(program)
    program.run()
    program.trainer.run(program.loader, max_epochs=EPOCHS + 2)
    assert oracle.disagreements == []
    view = program.progress.view
    assert view.train.batches.run.completed == program.trainer.state.iteration == (EPOCHS + 2) * PER_EPOCH
    assert view.train.epochs.run == PhaseCounts(*(EPOCHS + 2,) * 4)
    assert view.global_step == (EPOCHS + 2) * PER_EPOCH
    assert view.run.counts == PhaseCounts(1, 1, 1, 1)


def test_run_again_after_terminate_continues_where_ignite_continues() -> None:
    program = build(Config(), seed=0)
    oracle = _checked(program)
    program.trainer.add_event_handler(Events.ITERATION_COMPLETED(once=6), lambda: program.trainer.terminate())
    program.run()
    program.run()
    assert oracle.disagreements == []
    assert program.progress.view.train.epochs.run.completed == program.trainer.state.epoch == EPOCHS
    assert program.progress.view.anomalies == ()


# exceptions -------------------------------------------------------------------------------------
def test_a_swallowed_step_exception_trains_as_many_iterations_as_without_the_handler() -> None:
    program = build(Config(), seed=0)
    _raise_at(program, 6)
    oracle = _checked(program)
    program.trainer.add_event_handler(Events.EXCEPTION_RAISED, lambda engine, error: None)
    with pytest.warns(RuntimeWarning, match="train batch 1 cut by an exception") as caught:
        program.run()
    # Ignite ends the epoch at the failed step; the tracker counts that step as Ignite does.
    state = program.trainer.state
    assert (state.iteration, state.epoch) == _iterations_without_the_handler(6) == (10, EPOCHS)
    assert len(program.seen) == 10 - 1  # the failed step raised before reading its batch
    assert oracle.disagreements == []
    assert len([w for w in caught if issubclass(w.category, RuntimeWarning)]) == 1
    assert len(program.progress.view.anomalies) == 1


def test_every_anomaly_is_recorded_and_only_the_first_warns() -> None:
    program = build(Config(), seed=0)
    _raise_at(program, 2)
    _raise_at(program, 6)
    program.trainer.add_event_handler(Events.EXCEPTION_RAISED, lambda engine, error: None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program.run()
    assert len([w for w in caught if issubclass(w.category, RuntimeWarning)]) == 1
    assert len(program.progress.view.anomalies) == 2


def test_an_exception_that_leaves_run_leaves_the_record_where_ignite_stopped() -> None:
    program = build(Config(), seed=0)
    _raise_at(program, 6)
    oracle = _checked(program)
    with pytest.raises(Boom):
        program.run()
    view, state = program.progress.view, program.trainer.state
    assert view.train.batches.run.started == state.iteration == 6  # the step that raised is in flight
    assert view.train.batches.run.completed == 5 and view.run.counts.in_flight
    assert oracle.disagreements == []
    program.run()  # Ignite 0.5.5 does nothing: its run generator ended with the exception
    assert view.train.batches.run.started == state.iteration == 6


def test_a_validation_cut_by_an_exception_is_closed_and_noted_at_the_next_validation() -> None:
    program = build(Config(), seed=0)
    oracle = _checked(program)
    fail = [True]

    @program.evaluator.on(Events.ITERATION_COMPLETED(once=2))
    def cut() -> None:
        if fail[0]:
            fail[0] = False
            raise Boom("validation")

    program.trainer.add_event_handler(Events.EXCEPTION_RAISED, lambda engine, error: None)
    program.run()  # the exception leaves the evaluator and ends the trainer's run at epoch 1's end
    assert program.trainer.state.iteration == PER_EPOCH
    with pytest.warns(RuntimeWarning, match="validate epoch 0 ended after 2 batches"):
        program.run()  # continues Ignite's state; epoch 2's evaluator.run() is a no-op in Ignite 0.5.5
    assert oracle.disagreements == []
    assert program.trainer.state.iteration == EPOCHS * PER_EPOCH
    validate = program.progress.view.validate
    assert validate.epochs.lifetime.completed == 2  # the cut one (closed at epoch 3's validation) and epoch 3's
    assert validate.batches.lifetime.completed == 2 + 3


# loaders ----------------------------------------------------------------------------------------
class _NoInitLoader(DataLoader[Any]):
    """A DataLoader subclass that never calls DataLoader.__init__ (it yields its own batches)."""

    def __init__(self, batches: list[Any]) -> None:  # never calls DataLoader.__init__, on purpose
        self.batches = batches

    def __iter__(self) -> Any:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def test_a_dataloader_subclass_without_dataloader_init_trains_untracked_with_one_warning() -> None:
    batches = [torch.zeros(2, 1) for _ in range(3)]
    trainer = Engine(lambda engine, batch: None)
    progress = ProgressHandler()
    progress.attach(trainer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.run(_NoInitLoader(batches), max_epochs=2)
    inexact = [w for w in caught if issubclass(w.category, InexactResumeWarning)]
    assert len(inexact) == 1 and "_NoInitLoader" in str(inexact[0].message)
    assert progress.view.train.batches.run.completed == trainer.state.iteration == 6


# pickling ---------------------------------------------------------------------------------------
def test_an_attached_handler_pickles_and_deep_copies_as_its_progress() -> None:
    program = build(Config(), seed=0)
    program.run()
    for copied in (pickle.loads(pickle.dumps(program.progress)), copy.deepcopy(program.progress)):
        assert copied.view.state_dict() == program.progress.view.state_dict()
        assert copied.view.validate.samples.lifetime == EPOCHS * VAL_SIZE


# what the handler keeps alive ---------------------------------------------------------------------
def _freed_when_dropped(ran: Callable[[], Program], display: bool) -> list[bool]:
    """Whether the trainer, evaluator, model and loader of the program ``ran()`` returns are freed as soon as
    the user drops them (garbage collection off: nothing in a reference cycle is), the ProgressHandler kept;
    and whether that handler still holds the run's progress."""
    program = ran()
    if display:
        shown = ProgressDisplay(stream=io.StringIO(), terminal=False)
        shown.attach(program.trainer)
        shown.attach(program.evaluator)
    refs = [weakref.ref(o) for o in (program.trainer, program.evaluator, program.model, program.loader)]
    handler = program.progress
    gc.disable()
    try:
        del program
        return [ref() is None for ref in refs] + [handler.view.train.batches.lifetime.completed > 0]
    finally:
        gc.enable()


def _ran(program: Program) -> Program:
    program.run()
    return program


def test_engines_the_user_drops_are_freed_at_once_with_the_model_their_steps_hold() -> None:
    _ran(build(Config(), seed=0))  # first: torch's imports on a first use leave frames behind
    gc.collect()
    assert _freed_when_dropped(lambda: _ran(build(Config(), seed=0)), display=True) == [True] * 5


def test_resumed_engines_the_user_drops_are_freed_at_once(tmp_path: Path) -> None:
    saving = build(Config(), seed=0)
    save_every_iteration(saving, tmp_path)
    saving.run()
    del saving
    gc.collect()
    assert _freed_when_dropped(lambda: resume(Config(), tmp_path / "6.pt"), display=False) == [True] * 5
