"""Scheduler steps counted by count_scheduler_steps on real torch LR schedulers, the scheduler left as it was."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch

from tracker_core import Progress
from tracker_core.adapter import count_scheduler_steps

from helpers.core_drive import in_fit_epoch


def _scheduler() -> torch.optim.lr_scheduler.StepLR:
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)


def _step(scheduler: torch.optim.lr_scheduler.LRScheduler, times: int) -> None:
    for _ in range(times):
        scheduler.optimizer.step()
        scheduler.step()


def test_each_step_of_each_scheduler_is_counted_and_equals_its_last_epoch() -> None:
    progress = in_fit_epoch()
    first, second = _scheduler(), _scheduler()
    count_scheduler_steps(progress.train, [first, second])
    _step(first, 3)
    _step(second, 2)
    assert (first.last_epoch, second.last_epoch) == (3, 2)
    assert progress.view.train.scheduler_steps.lifetime == 5


def test_counting_a_scheduler_again_counts_each_step_once_for_the_latest_progress() -> None:
    earlier, latest = in_fit_epoch(), in_fit_epoch()
    scheduler = _scheduler()
    count_scheduler_steps(earlier.train, [scheduler])
    count_scheduler_steps(latest.train, [scheduler])
    _step(scheduler, 2)
    assert (earlier.view.train.scheduler_steps.lifetime, latest.view.train.scheduler_steps.lifetime) == (0, 2)


def test_removing_the_handles_stops_counting() -> None:
    progress = in_fit_epoch()
    scheduler = _scheduler()
    for handle in count_scheduler_steps(progress.train, [scheduler]):
        handle.remove()
    _step(scheduler, 1)
    assert progress.view.train.scheduler_steps.lifetime == 0


def test_a_counted_scheduler_keeps_its_state_dict_class_name_and_learning_rates() -> None:
    counted, plain = _scheduler(), _scheduler()
    count_scheduler_steps(in_fit_epoch().train, [counted])
    _step(counted, 3)
    _step(plain, 3)
    assert counted.state_dict() == plain.state_dict()
    assert counted.get_last_lr() == plain.get_last_lr()
    assert type(counted).__name__ == "StepLR" and isinstance(counted, torch.optim.lr_scheduler.StepLR)
    buffer = io.BytesIO()
    torch.save(counted.state_dict(), buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True) == plain.state_dict()


@pytest.mark.filterwarnings("ignore:Seems like `optimizer.step\\(\\)` has been overridden")  # torch, on any copy
def test_a_pickled_or_copied_scheduler_is_a_plain_one_of_its_class_and_is_not_counted() -> None:
    progress = in_fit_epoch()
    scheduler = _scheduler()
    count_scheduler_steps(progress.train, [scheduler])
    for twin in (pickle.loads(pickle.dumps(scheduler)), copy.deepcopy(scheduler)):
        assert type(twin) is torch.optim.lr_scheduler.StepLR
        _step(twin, 1)
    assert progress.view.train.scheduler_steps.lifetime == 0


def test_a_step_that_raises_is_not_counted() -> None:
    progress = in_fit_epoch()
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(torch.optim.SGD(torch.nn.Linear(2, 1).parameters()))
    count_scheduler_steps(progress.train, [scheduler])
    with pytest.raises(TypeError):
        scheduler.step()  # type: ignore[call-arg]  # ReduceLROnPlateau steps with a metric
    scheduler.step(1.0)
    assert progress.view.train.scheduler_steps.lifetime == 1


def test_a_callable_handler_is_counted_per_call_with_method_call() -> None:
    class Handler:
        def __call__(self, engine: object) -> None:
            pass

    progress = in_fit_epoch()
    handler = Handler()
    count_scheduler_steps(progress.train, [handler], method="__call__")
    handler(None)
    handler(None)
    assert progress.view.train.scheduler_steps.lifetime == 2


def test_a_scheduler_without_weak_references_is_counted_too() -> None:
    class Slotted:
        __slots__ = ()

        def step(self) -> None:
            pass

    progress = in_fit_epoch()
    scheduler = Slotted()
    count_scheduler_steps(progress.train, [scheduler])
    scheduler.step()
    assert progress.view.train.scheduler_steps.lifetime == 1


def test_an_object_without_the_method_is_refused_naming_it() -> None:
    with pytest.raises(TypeError, match=r"object has no step\(\)"):
        count_scheduler_steps(in_fit_epoch().train, [object()])


def test_scheduler_steps_survive_a_state_dict_round_trip() -> None:
    progress = in_fit_epoch()
    scheduler = _scheduler()
    count_scheduler_steps(progress.train, [scheduler])
    _step(scheduler, 3)
    loaded = Progress()
    loaded.load_state_dict(progress.state_dict())
    assert loaded.view.train.scheduler_steps == progress.view.train.scheduler_steps
