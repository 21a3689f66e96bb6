"""The one-call batch operations (``batch_next``, ``batch_processed_of``, ``batch_end_of``, ``batch_turn``,
``batch_turner``) and ``stepped_in_batch``: each counts exactly what the phase marks it stands for count, and refuses what they refuse."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tracker_core import EventOrderError, Progress
from tracker_core.adapter import samples_in

BATCHES: list[Any] = [
    (torch.zeros(4, 3), torch.zeros(4)),
    [torch.zeros(2, 3)],
    torch.zeros(5, 3),
    torch.tensor(1.0),
    {"input_ids": torch.zeros(3, 7)},
    ["a", "b"],
    (),
    None,
]


def _in_epoch() -> Progress:
    progress = Progress()
    progress.run_ready("fit")
    progress.run_started()
    progress.train.epoch_ready()
    progress.train.epoch_started()
    return progress


def _counts(progress: Progress) -> tuple[Any, ...]:
    view = progress.view.train
    return (view.batches.lifetime, view.samples.lifetime, view.dataloaders, progress.view.where)


@pytest.mark.parametrize("batch", BATCHES, ids=repr)
def test_batch_end_of_counts_what_batch_end_counts_with_samples_in(batch: Any) -> None:
    one, two = _in_epoch(), _in_epoch()
    for progress in (one, two):
        progress.train.batch_begin()
    one.train.batch_end_of(batch, 1)
    two.train.batch_end(samples_in(batch), 1)
    assert _counts(one) == _counts(two)


@pytest.mark.parametrize("batch", BATCHES, ids=repr)
def test_batch_processed_of_counts_what_batch_processed_counts_with_samples_in(batch: Any) -> None:
    one, two = _in_epoch(), _in_epoch()
    for progress in (one, two):
        progress.train.batch_begin()
    one.train.batch_processed_of(batch, 1)
    two.train.batch_processed(samples_in(batch), 1)
    assert _counts(one) == _counts(two)


@pytest.mark.parametrize("batch", BATCHES, ids=repr)
def test_batch_turn_is_batch_end_of_then_batch_begin(batch: Any) -> None:
    one, two = _in_epoch(), _in_epoch()
    for progress in (one, two):
        progress.train.batch_begin()
    one.train.batch_turn(batch)
    two.train.batch_end_of(batch)
    two.train.batch_begin()
    assert _counts(one) == _counts(two)


@pytest.mark.parametrize("batch", BATCHES, ids=repr)
def test_a_batch_turner_turns_batches_as_batch_turn_does(batch: Any) -> None:
    one, two = _in_epoch(), _in_epoch()
    for progress in (one, two):
        progress.train.batch_begin()
    turn = one.train.batch_turner(1)
    for _ in range(3):
        turn(batch)
        two.train.batch_turn(batch, 1)
        assert _counts(one) == _counts(two)


def test_a_batch_turner_refuses_what_batch_turn_refuses_and_counts_the_same() -> None:
    one, two = _in_epoch(), _in_epoch()
    turn = one.train.batch_turner()
    with pytest.raises(EventOrderError, match="none was started"):
        turn((torch.zeros(2),))
    for progress in (one, two):
        progress.train.batch_begin()
        progress.train.epoch_processed()
        progress.train.epoch_completed()
    with pytest.raises(EventOrderError, match="outside an epoch"):
        turn((torch.zeros(3),))
    with pytest.raises(EventOrderError, match="outside an epoch"):
        two.train.batch_turn((torch.zeros(3),))
    assert _counts(one) == _counts(two)


def test_a_batch_turner_refuses_a_negative_dataloader() -> None:
    with pytest.raises(ValueError, match="dataloader"):
        _in_epoch().train.batch_turner(-1)


def test_a_batch_turner_made_before_a_load_counts_into_the_loaded_counts() -> None:
    saved = _in_epoch()
    saved.train.batch_begin()
    saved.train.batch_end(2)  # a load cancels a batch in flight: saved between batches
    one, two = _in_epoch(), _in_epoch()
    turn = one.train.batch_turner()
    for progress in (one, two):
        progress.load_state_dict(saved.state_dict())  # new dataloader counts
        progress.train.batch_begin()
    turn((torch.zeros(3),))
    two.train.batch_turn((torch.zeros(3),))
    assert _counts(one) == _counts(two)
    assert one.view.train.dataloaders[0].samples.lifetime == 5


def test_batch_next_completes_a_processed_batch_then_readies_the_next() -> None:
    one, two = _in_epoch(), _in_epoch()
    for progress in (one, two):
        progress.train.batch_ready()
        progress.train.batch_started()
        progress.train.batch_processed(4)
    one.train.batch_next()
    two.train.batch_completed()
    two.train.batch_ready()
    assert _counts(one) == _counts(two)


def test_batch_next_with_no_batch_in_flight_is_batch_ready() -> None:
    one, two = _in_epoch(), _in_epoch()
    one.train.batch_next()
    two.train.batch_ready()
    assert _counts(one) == _counts(two)


def test_batch_next_refuses_while_a_batch_is_not_processed() -> None:
    progress = _in_epoch()
    progress.train.batch_begin()
    before = _counts(progress)
    with pytest.raises(EventOrderError, match="not completed"):
        progress.train.batch_next()
    assert _counts(progress) == before


def test_batch_next_refuses_outside_an_epoch() -> None:
    progress = Progress()
    progress.run_ready("fit")
    progress.run_started()
    with pytest.raises(EventOrderError, match="outside an epoch"):
        progress.train.batch_next()


def test_batch_end_of_refuses_a_batch_never_started() -> None:
    progress = _in_epoch()
    with pytest.raises(EventOrderError, match="before it was started"):
        progress.train.batch_end_of((torch.zeros(2),))
    assert progress.view.train.samples.lifetime == 0


def test_batch_turn_refuses_with_no_batch_started() -> None:
    progress = _in_epoch()
    with pytest.raises(EventOrderError):
        progress.train.batch_turn((torch.zeros(2),))
    assert progress.view.train.batches.lifetime.ready == 0


def test_batch_turn_after_the_epoch_was_processed_ends_the_batch_and_refuses_the_next() -> None:
    progress = _in_epoch()
    progress.train.batch_begin()
    progress.train.epoch_processed()
    progress.train.epoch_completed()
    with pytest.raises(EventOrderError, match="outside an epoch"):
        progress.train.batch_turn((torch.zeros(3),))
    assert progress.view.train.batches.lifetime.completed == 1
    assert not progress.view.train.batches.lifetime.in_flight
    assert progress.view.where == ("train", "batch", "completed")


def test_a_negative_dataloader_is_refused() -> None:
    progress = _in_epoch()
    progress.train.batch_begin()
    with pytest.raises(ValueError, match="dataloader"):
        progress.train.batch_end_of((torch.zeros(2),), -1)


def test_stepped_in_batch_says_whether_an_optimizer_stepped_while_the_batch_was_in_flight() -> None:
    progress = _in_epoch()
    train = progress.train
    assert not train.stepped_in_batch
    train.batch_begin()
    assert not train.stepped_in_batch
    train.optimizer_step()
    assert train.stepped_in_batch
    train.batch_turn((torch.zeros(2),))
    assert not train.stepped_in_batch
    train.optimizer_step_skipped()
    assert train.stepped_in_batch
    train.batch_end(2)
    assert not train.stepped_in_batch
