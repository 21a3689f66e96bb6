"""Ignite: each call of a param-scheduler handler and each step() of a torch scheduler given to attach is a
scheduler step, through a checkpoint."""

from __future__ import annotations

import gc
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ignite")

import torch
from ignite.engine import Engine, EventEnum, Events
from ignite.handlers import (
    Checkpoint,
    ConcatScheduler,
    CosineAnnealingScheduler,
    DiskSaver,
    LinearCyclicalScheduler,
    LRScheduler,
    ParamGroupScheduler,
    PiecewiseLinear,
)
from torch.utils.data import DataLoader, TensorDataset

from tracker_core import get_progress
from tracker_core.integrations.ignite import ProgressHandler

EPOCHS, BATCHES = 3, 4


class Killed(Exception):
    """Stands in for the process being killed right after a checkpoint."""


@dataclass
class Program:
    """A trainer whose LR follows Ignite's LRScheduler handler, momentum a PiecewiseLinear handler, and whose
    step function steps a torch scheduler of a second optimizer every other iteration."""

    trainer: Engine
    lr: LRScheduler
    momentum: PiecewiseLinear
    stepped: torch.optim.lr_scheduler.StepLR
    objects: dict[str, Any]

    def scheduler_changes(self) -> int:
        """What the three schedulers themselves say they did."""
        return self.lr.lr_scheduler.last_epoch + self.momentum.event_index + self.stepped.last_epoch


def _program() -> Program:
    torch.manual_seed(0)
    model, other = torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    second = torch.optim.SGD(other.parameters(), lr=0.1)
    stepped = torch.optim.lr_scheduler.StepLR(second, step_size=2)

    def step(engine: Engine, batch: Any) -> None:
        x, y = batch
        for module, opt in ((model, optimizer), (other, second)):
            opt.zero_grad()
            torch.autograd.backward(torch.nn.functional.mse_loss(module(x), y))
            opt.step()
        if engine.state.iteration % 2 == 0:
            stepped.step()

    trainer = Engine(step)
    lr = LRScheduler(torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5))
    momentum = PiecewiseLinear(optimizer, "momentum", milestones_values=[(0, 0.9), (6, 0.5)])
    trainer.add_event_handler(Events.ITERATION_COMPLETED, lr)
    # Not EPOCH_STARTED: Ignite fires it again when a run resumes mid-epoch, and that extra call is counted
    trainer.add_event_handler(Events.EPOCH_COMPLETED, momentum)
    progress = ProgressHandler()
    progress.attach(trainer, optimizers=[optimizer, second], schedulers=[lr, momentum, stepped])
    objects = {
        "trainer": trainer,
        "model": model,
        "other": other,
        "optimizer": optimizer,
        "second": second,
        "lr": lr,
        "momentum": momentum,
        "stepped": stepped,
        "progress": progress,
    }
    return Program(trainer, lr, momentum, stepped, objects)


def _data() -> DataLoader[Any]:
    g = torch.Generator().manual_seed(1)
    return DataLoader(
        TensorDataset(torch.randn(4 * BATCHES, 4, generator=g), torch.randn(4 * BATCHES, 1, generator=g)), batch_size=4
    )


def test_scheduler_steps_equal_what_the_handlers_and_the_torch_scheduler_did() -> None:
    program = _program()
    program.trainer.run(_data(), max_epochs=EPOCHS)
    iterations = EPOCHS * BATCHES
    assert program.scheduler_changes() == iterations + EPOCHS + iterations // 2
    assert get_progress(program.trainer).train.scheduler_steps.lifetime == program.scheduler_changes()


def test_scheduler_steps_survive_a_mid_epoch_checkpoint_round_trip(tmp_path: Path) -> None:
    killed = _program()
    checkpoint = Checkpoint(killed.objects, DiskSaver(str(tmp_path), require_empty=False), filename_pattern="{name}.pt")

    @killed.trainer.on(Events.ITERATION_COMPLETED(once=BATCHES + 2))
    def save_and_die(engine: Engine) -> None:
        checkpoint(engine)
        raise Killed

    with pytest.raises(Killed):
        killed.trainer.run(_data(), max_epochs=EPOCHS)
    saved = get_progress(killed.trainer).train.scheduler_steps.lifetime
    assert saved == killed.scheduler_changes() > 0

    resumed = _program()
    Checkpoint.load_objects(resumed.objects, str(tmp_path / "checkpoint.pt"))
    assert get_progress(resumed.trainer).train.scheduler_steps.lifetime == resumed.scheduler_changes() == saved
    resumed.trainer.run(_data(), max_epochs=EPOCHS)
    straight = _program()
    straight.trainer.run(_data(), max_epochs=EPOCHS)
    assert get_progress(resumed.trainer).train.scheduler_steps.lifetime == resumed.scheduler_changes()
    assert get_progress(resumed.trainer).train.scheduler_steps == get_progress(straight.trainer).train.scheduler_steps


def test_schedulers_given_with_an_evaluator_are_refused() -> None:
    program = _program()
    with pytest.raises(ValueError, match="schedulers"):
        ProgressHandler().attach(Engine(lambda e, b: None), stage="validate", schedulers=[program.lr])


def _handlers(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Ignite's param-scheduler kinds whose calls are not one event_index."""
    cosine = CosineAnnealingScheduler(optimizer, "lr", 0.1, 0.01, cycle_size=3, cycle_mult=2.0, warmup_duration=1)
    linear = LinearCyclicalScheduler(optimizer, "lr", 0.1, 0.01, cycle_size=2)
    piecewise = PiecewiseLinear(optimizer, "lr", milestones_values=[(0, 0.1), (5, 0.01)])
    groups = [
        LinearCyclicalScheduler(optimizer, "momentum", 0.9, 0.5, cycle_size=2, param_group_index=index)
        for index in range(len(optimizer.param_groups))
    ]
    return {
        "cycles of growing length": cosine,
        "concatenated": ConcatScheduler([linear, piecewise], durations=[3]),
        "param groups": ParamGroupScheduler(groups),
    }


@pytest.mark.parametrize("kind", ["cycles of growing length", "concatenated", "param groups"])
def test_each_call_of_each_ignite_scheduler_kind_is_one_step(kind: str) -> None:
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD([{"params": [model.weight]}, {"params": [model.bias]}], lr=0.1, momentum=0.9)
    handler = _handlers(optimizer)[kind]
    trainer = Engine(lambda engine, batch: None)
    trainer.add_event_handler(Events.ITERATION_COMPLETED, handler)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, handler)
    ProgressHandler().attach(trainer, optimizers=[optimizer], schedulers=[handler])
    trainer.run([0] * 10, max_epochs=2)  # 22 calls: 10 iterations and an epoch end, twice
    assert get_progress(trainer).train.scheduler_steps.lifetime == 22


def test_a_handler_not_attached_to_the_trainer_is_refused_naming_it() -> None:
    program = _program()
    with pytest.raises(
        ValueError, match="the PiecewiseLinear in schedulers is neither a torch LR scheduler nor attached"
    ):
        ProgressHandler().attach(Engine(lambda e, b: None), schedulers=[program.momentum])


def test_a_handler_attached_to_a_custom_event_is_refused_naming_the_custom_event() -> None:
    class StepEvents(EventEnum):
        OPTIMIZER_STEPPED = "optimizer_stepped"

    program = _program()
    trainer = Engine(lambda e, b: None)
    trainer.register_events(*StepEvents)
    trainer.add_event_handler(StepEvents.OPTIMIZER_STEPPED, program.momentum)
    with pytest.raises(ValueError, match="the PiecewiseLinear in schedulers is attached to a custom event"):
        ProgressHandler().attach(trainer, schedulers=[program.momentum])


def test_the_scheduler_handlers_are_left_as_they_were() -> None:
    program = _program()
    assert type(program.lr) is LRScheduler and type(program.momentum) is PiecewiseLinear
    assert type(program.stepped) is torch.optim.lr_scheduler.StepLR


def test_the_schedulers_the_user_drops_are_freed_with_the_trainer_while_the_handler_lives() -> None:
    program = _program()
    program.trainer.run(_data(), max_epochs=EPOCHS)
    handler, changes = program.objects["progress"], program.scheduler_changes()
    refs = [weakref.ref(program.objects[name]) for name in ("trainer", "model", "other", "stepped", "lr", "momentum")]
    del program
    gc.collect()
    assert [ref() for ref in refs] == [None] * 6
    assert handler.view.train.scheduler_steps.lifetime == changes


@pytest.mark.parametrize(("iteration", "warns"), [(2, True), (4, False)], ids=["mid-epoch", "epoch-last-batch"])
def test_a_checkpoint_with_a_scheduler_on_epoch_started_warns_that_a_mid_epoch_resume_calls_it_again(
    iteration: int, warns: bool
) -> None:
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = Engine(lambda engine, batch: None)
    scheduler = PiecewiseLinear(optimizer, "lr", milestones_values=[(0, 0.1), (3, 0.01)])
    trainer.add_event_handler(Events.EPOCH_STARTED, scheduler)
    progress = ProgressHandler()
    progress.attach(trainer, optimizers=[optimizer], schedulers=[scheduler])
    trainer.add_event_handler(Events.ITERATION_COMPLETED(once=iteration), lambda: progress.state_dict())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.run([0] * BATCHES, max_epochs=2)
    again = [w for w in caught if "PiecewiseLinear on EPOCH_STARTED" in str(w.message)]
    assert len(again) == int(warns)
