"""Scheduler steps counted by count_scheduler_steps from real torch LR schedulers' own last_epoch, the
scheduler left as it was."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable

import pytest
import torch
from torch.optim import lr_scheduler

from tracker_core import Progress
from tracker_core.adapter import count_scheduler_steps

from helpers.core_drive import in_fit_epoch


def _optimizer() -> torch.optim.SGD:
    return torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.1)


def _scheduler() -> lr_scheduler.StepLR:
    return lr_scheduler.StepLR(_optimizer(), step_size=2, gamma=0.5)


def _step(scheduler: lr_scheduler.LRScheduler, times: int) -> None:
    for _ in range(times):
        scheduler.optimizer.step()
        scheduler.step()


def _steps(progress: Progress) -> int:
    return progress.view.train.scheduler_steps.lifetime


def test_each_step_of_each_scheduler_is_counted_and_equals_its_last_epoch() -> None:
    progress = in_fit_epoch()
    first, second = _scheduler(), _scheduler()
    count_scheduler_steps(progress.train, [first, second])
    _step(first, 3)
    _step(second, 2)
    assert (first.last_epoch, second.last_epoch) == (3, 2)
    assert _steps(progress) == 5


def test_a_scheduler_given_twice_is_counted_once() -> None:
    progress = in_fit_epoch()
    scheduler = _scheduler()
    count_scheduler_steps(progress.train, [scheduler, scheduler])
    _step(scheduler, 2)
    assert _steps(progress) == 2


def test_counting_other_schedulers_keeps_what_the_earlier_ones_stepped_until_then() -> None:
    progress = in_fit_epoch()
    earlier, later = _scheduler(), _scheduler()
    count_scheduler_steps(progress.train, [earlier])
    _step(earlier, 2)
    count_scheduler_steps(progress.train, [later])
    _step(earlier, 1)
    _step(later, 1)
    assert _steps(progress) == 3


def test_no_schedulers_stops_counting() -> None:
    progress = in_fit_epoch()
    scheduler = _scheduler()
    count_scheduler_steps(progress.train, [scheduler])
    _step(scheduler, 1)
    count_scheduler_steps(progress.train, [])
    _step(scheduler, 2)
    assert _steps(progress) == 1


def test_steps_before_an_epoch_begins_are_not_in_its_epoch_scope() -> None:
    progress = in_fit_epoch()
    scheduler = _scheduler()
    count_scheduler_steps(progress.train, [scheduler])
    _step(scheduler, 2)
    progress.train.epoch_processed()
    progress.train.epoch_completed()
    _step(scheduler, 1)  # an epoch-interval scheduler steps after the epoch's end hooks
    progress.train.epoch_ready()
    progress.train.epoch_started()
    _step(scheduler, 1)
    counts = progress.view.train.scheduler_steps
    assert (counts.epoch, counts.run, counts.lifetime) == (1, 4, 4)


def test_the_scheduler_is_left_as_it_was() -> None:
    counted, plain = _scheduler(), _scheduler()
    before = set(vars(counted))
    count_scheduler_steps(in_fit_epoch().train, [counted])
    _step(counted, 3)
    _step(plain, 3)
    assert type(counted) is lr_scheduler.StepLR and set(vars(counted)) == before
    assert counted.state_dict() == plain.state_dict()


Stepped = tuple[lr_scheduler.LRScheduler, Callable[[], None]]


def _plateau() -> Stepped:
    scheduler = lr_scheduler.ReduceLROnPlateau(_optimizer(), patience=0)
    return scheduler, lambda: scheduler.step(1.0)  # ReduceLROnPlateau steps with a metric


def _plain(make: Callable[[torch.optim.Optimizer], lr_scheduler.LRScheduler]) -> Callable[[], Stepped]:
    def made() -> Stepped:
        scheduler = make(_optimizer())
        return scheduler, scheduler.step

    return made


def _sequential(optimizer: torch.optim.Optimizer) -> lr_scheduler.LRScheduler:
    parts = [lr_scheduler.ConstantLR(optimizer, total_iters=2), lr_scheduler.ExponentialLR(optimizer, 0.9)]
    return lr_scheduler.SequentialLR(optimizer, parts, milestones=[2])


KINDS: dict[str, Callable[[], Stepped]] = {
    "LambdaLR": _plain(lambda o: lr_scheduler.LambdaLR(o, lambda epoch: 0.9**epoch)),
    "OneCycleLR": _plain(lambda o: lr_scheduler.OneCycleLR(o, max_lr=1.0, total_steps=10)),
    "CosineAnnealingWarmRestarts": _plain(lambda o: lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=2)),
    "SequentialLR": _plain(_sequential),
    "ReduceLROnPlateau": _plateau,
}


@pytest.mark.parametrize("kind", list(KINDS))
def test_each_call_of_step_of_each_torch_scheduler_kind_is_one_step(kind: str) -> None:
    progress = in_fit_epoch()
    scheduler, step = KINDS[kind]()
    count_scheduler_steps(progress.train, [scheduler])
    for _ in range(5):
        scheduler.optimizer.step()
        step()
    assert _steps(progress) == 5


def test_an_object_without_an_int_last_epoch_is_noted_once_not_counted() -> None:
    chained = lr_scheduler.ChainedScheduler([lr_scheduler.ExponentialLR(_optimizer(), 0.9)])
    progress = in_fit_epoch()
    with pytest.warns(RuntimeWarning, match="the steps of a ChainedScheduler are not counted"):
        count_scheduler_steps(progress.train, [chained])
    count_scheduler_steps(progress.train, [chained])  # a second run start: noted already
    chained.optimizer.step()
    chained.step()
    assert _steps(progress) == 0
    assert progress.view.anomalies == ("the steps of a ChainedScheduler are not counted (no int last_epoch)",)


def test_a_restore_of_the_scheduler_after_a_progress_load_is_not_a_step() -> None:
    saved, scheduler = in_fit_epoch(), _scheduler()
    count_scheduler_steps(saved.train, [scheduler])
    _step(scheduler, 3)
    resumed, fresh = Progress(), _scheduler()
    count_scheduler_steps(resumed.train, [fresh])
    resumed.load_state_dict(saved.state_dict())
    fresh.load_state_dict(scheduler.state_dict())
    assert _steps(resumed) == 3
    count_scheduler_steps(resumed.train, [fresh])  # the run starts: counted from the restored state
    _step(fresh, 1)
    assert _steps(resumed) == 4


def test_a_count_that_goes_back_is_counted_on_from_there() -> None:
    progress = in_fit_epoch()
    scheduler = _scheduler()
    count_scheduler_steps(progress.train, [scheduler])
    _step(scheduler, 1)
    earlier = scheduler.state_dict()
    _step(scheduler, 2)
    assert _steps(progress) == 3  # read (as a save would)
    scheduler.load_state_dict(earlier)  # last_epoch 1
    assert _steps(progress) == 3
    _step(scheduler, 1)
    assert _steps(progress) == 4


def test_scheduler_steps_survive_a_state_dict_round_trip() -> None:
    progress = in_fit_epoch()
    scheduler = _scheduler()
    count_scheduler_steps(progress.train, [scheduler])
    _step(scheduler, 3)
    loaded = Progress()
    loaded.load_state_dict(progress.state_dict())
    assert loaded.view.train.scheduler_steps == progress.view.train.scheduler_steps


def test_a_counted_scheduler_the_user_drops_after_the_run_is_freed_its_steps_kept() -> None:
    progress = in_fit_epoch()
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = lr_scheduler.StepLR(optimizer, step_size=2)
    count_scheduler_steps(progress.train, [scheduler])
    _step(scheduler, 2)
    progress.train.epoch_processed()
    progress.train.epoch_completed()
    progress.run_processed()
    progress.run_completed()
    refs = [weakref.ref(scheduler), weakref.ref(model)]
    del model, optimizer, scheduler
    gc.collect()
    assert [ref() for ref in refs] == [None, None]
    assert _steps(progress) == 2
