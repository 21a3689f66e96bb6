"""Optimizer steps counted through torch's step hooks, and AMP-skipped steps from the scaler's public scale."""

from __future__ import annotations

import torch

from tracker_core import Progress, count_optimizer_steps
from tracker_core.adapter import count_skipped_steps

from helpers.core_drive import in_fit_epoch


def _optimizer() -> torch.optim.Optimizer:
    model = torch.nn.Linear(2, 1)
    for parameter in model.parameters():
        parameter.grad = torch.ones_like(parameter)
    return torch.optim.SGD(model.parameters(), lr=0.1)


def test_each_step_of_each_optimizer_is_counted_as_that_optimizers_step() -> None:
    progress = in_fit_epoch()
    first, second = _optimizer(), _optimizer()
    count_optimizer_steps(progress.train, [first, second])
    first.step()
    second.step()
    second.step()
    assert [s.run for s in progress.view.train.optimizer_steps_by_optimizer] == [1, 2]


def test_optimizers_hooked_later_are_numbered_from_first_index() -> None:
    progress = in_fit_epoch()
    late = _optimizer()
    count_optimizer_steps(progress.train, [late], first_index=1)
    late.step()
    assert [s.run for s in progress.view.train.optimizer_steps_by_optimizer] == [0, 1]


def test_a_step_ends_the_accumulation_window_like_optimizer_step() -> None:
    progress = in_fit_epoch()
    optimizer = _optimizer()
    count_optimizer_steps(progress.train, [optimizer])
    progress.train.batch_begin()
    progress.train.batch_end(4)
    assert progress.view.is_mid_accumulation
    optimizer.step()
    assert not progress.view.is_mid_accumulation


def test_steps_after_loading_a_state_without_that_optimizer_are_still_counted() -> None:
    progress = in_fit_epoch()
    optimizer = _optimizer()
    count_optimizer_steps(progress.train, [optimizer])
    empty = Progress().state_dict()
    progress.load_state_dict(empty)
    optimizer.step()
    assert progress.view.train.optimizer_steps.lifetime == 1


def test_removing_the_handles_stops_counting() -> None:
    progress = in_fit_epoch()
    optimizer = _optimizer()
    for handle in count_optimizer_steps(progress.train, [optimizer]):
        handle.remove()
    optimizer.step()
    assert progress.view.train.optimizer_steps.lifetime == 0


def _scaled_step(scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer, loss_scale: float) -> None:
    """One AMP step of ``optimizer``; an infinite ``loss_scale`` makes the scaler skip it."""
    optimizer.zero_grad()
    parameters = [p for group in optimizer.param_groups for p in group["params"]]
    scaler.scale(sum(p.sum() for p in parameters) * loss_scale).backward()
    scaler.step(optimizer)


def test_a_step_the_scaler_skips_is_counted_as_skipped_and_one_it_takes_as_a_step() -> None:
    progress = in_fit_epoch()
    optimizer = _optimizer()
    scaler = torch.amp.GradScaler("cpu", growth_interval=1)  # the scale grows after each step taken
    count_optimizer_steps(progress.train, [optimizer])
    check = count_skipped_steps(progress.train, scaler, [optimizer])
    for loss_scale in (float("inf"), 1.0, 1.0, float("inf"), float("inf"), 1.0):
        _scaled_step(scaler, optimizer, loss_scale)
        scaler.update()
        check()
    assert progress.view.train.optimizer_steps_skipped.lifetime == 3
    assert progress.view.train.optimizer_steps.lifetime == 3


def test_a_batch_without_an_update_counts_no_skipped_step() -> None:
    progress = in_fit_epoch()
    optimizer = _optimizer()
    scaler = torch.amp.GradScaler("cpu")
    check = count_skipped_steps(progress.train, scaler, [optimizer])
    check()  # an accumulation batch: no step, no update
    _scaled_step(scaler, optimizer, float("inf"))
    scaler.update()
    check()
    check()
    assert progress.view.train.optimizer_steps_skipped.lifetime == 1


def test_optimizers_on_a_shared_scaler_count_their_own_skips() -> None:
    progress = in_fit_epoch()
    first, second = _optimizer(), _optimizer()
    scaler = torch.amp.GradScaler("cpu")
    count_optimizer_steps(progress.train, [first, second])
    check = count_skipped_steps(progress.train, scaler, [first, second])
    _scaled_step(scaler, first, 1.0)
    _scaled_step(scaler, second, float("inf"))
    scaler.update()
    check()
    view = progress.view.train
    assert [s.lifetime for s in view.optimizer_steps_by_optimizer] == [1, 0]
    assert [s.lifetime for s in view.optimizer_steps_skipped_by_optimizer] == [0, 1]


def test_the_scaler_is_left_as_it_was() -> None:
    scaler = torch.amp.GradScaler("cpu")
    before = dict(vars(scaler))
    count_skipped_steps(in_fit_epoch().train, scaler, [_optimizer()])()
    assert vars(scaler) == before
