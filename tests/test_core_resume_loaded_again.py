"""Tracker.resume_loaded_again: a run that continues a resumed run which trained nothing resumes its data exactly
(a StatefulDataLoader, which resumes at its batch)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from tracker_core import InexactResumeWarning, Tracker

StatefulDataLoader = pytest.importorskip("torchdata.stateful_dataloader").StatefulDataLoader


class _Indexed(Dataset[int]):
    def __init__(self, size: int = 11) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        return index


def _loader(size: int = 11) -> DataLoader[Any]:
    return StatefulDataLoader(_Indexed(size), batch_size=3, shuffle=True)


def _batch(tracker: Tracker, ids: torch.Tensor) -> None:
    train = tracker.progress.train
    train.batch_ready()
    train.batch_started()
    train.batch_processed(len(ids))
    train.batch_completed()


def _entry_after_two_batches() -> tuple[dict[str, Any], list[list[int]]]:
    """A checkpoint entry after 2 of an epoch's 4 batches, and the batches the uninterrupted epoch reads."""
    torch.manual_seed(0)
    tracker, loader = Tracker(), _loader()
    tracker.track_train_loader(loader)
    progress = tracker.progress
    progress.run_ready("fit")
    progress.run_started()
    progress.train.epoch_ready()
    progress.train.epoch_started()
    iterator = iter(loader)
    first = [next(iterator) for _ in range(2)]
    for ids in first:
        _batch(tracker, ids)
    entry = json.loads(json.dumps(tracker.state_dict()))
    return entry, [ids.tolist() for ids in first] + [ids.tolist() for ids in iterator]


def test_loaders_of_a_later_run_resume_where_the_loaded_entry_says() -> None:
    entry, epoch = _entry_after_two_batches()
    tracker = Tracker()
    tracker.load_state_dict(entry)
    idle = _loader()
    tracker.track_train_loader(idle)
    iter(idle)  # the resumed run builds its iterator and trains nothing
    assert tracker.resume_loaded_again()
    later = _loader()
    tracker.track_train_loader(later)
    assert [ids.tolist() for ids in later] == epoch[2:]


def test_nothing_is_armed_again_once_a_train_batch_began_after_the_load() -> None:
    entry, _ = _entry_after_two_batches()
    tracker = Tracker()
    tracker.load_state_dict(entry)
    tracker.track_train_loader(_loader())
    tracker.progress.train.batch_ready()
    assert not tracker.resume_loaded_again()
    later = _loader()
    tracker.track_train_loader(later)
    assert len(list(later)) == 4  # a whole epoch


def test_nothing_is_armed_again_without_a_load() -> None:
    assert not Tracker().resume_loaded_again()


def test_a_later_loader_that_does_not_fit_the_loaded_position_is_read_whole_with_a_warning() -> None:
    entry, _ = _entry_after_two_batches()
    tracker = Tracker()
    tracker.load_state_dict(entry)
    tracker.track_train_loader(_loader())
    assert tracker.resume_loaded_again()
    other = _loader(size=20)  # another data set size: the saved order does not apply
    with pytest.warns(InexactResumeWarning, match="does not fit the loaded position"):
        tracker.track_train_loader(other)
    assert len(list(other)) == 7
    assert tracker.view.train.batches.epoch.completed == 2  # the progress is left as loaded
