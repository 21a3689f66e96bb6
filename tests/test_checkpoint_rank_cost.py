"""A rank's checkpoint cost does not grow with the number of ranks: its entry reaches only the writer
(rank 0), and on resume it reads only its own entry of the writer's file. Two real gloo processes."""

from __future__ import annotations

import functools
import pickle
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler, TensorDataset

pytest.importorskip("torchdata")

from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import Tracker

from helpers.gloo import run_on_two_ranks
from helpers.small_entry import BATCH_SIZE, DATASET_SIZE, trained


def _loader(rank: int) -> Any:
    """Rank ``rank``'s shard, read by a StatefulDataLoader: its mid-epoch position is its own state."""
    data = TensorDataset(torch.arange(float(DATASET_SIZE)))
    sampler = DistributedSampler(data, num_replicas=2, rank=rank, seed=0)
    return StatefulDataLoader(data, batch_size=BATCH_SIZE, sampler=sampler)


_COLLECTIVES = ("gather", "all_reduce", "all_gather", "gather_object", "all_gather_object")


def _spy(name: str, sent: list[tuple[str, int]]) -> Any:
    """torch.distributed's ``name``, noting the bytes of the tensor (or pickled object) this rank hands it."""
    collective = getattr(dist, name)

    def noted(obj: Any, *args: Any, **kwargs: Any) -> Any:
        size = obj.numel() * obj.element_size() if isinstance(obj, torch.Tensor) else len(pickle.dumps(obj))
        sent.append((name, size))
        return collective(obj, *args, **kwargs)

    return noted


def _save_and_resume(rank: int) -> dict[str, Any]:
    loader = _loader(rank)
    tracker, _, rest = trained(3, loader)
    sent: list[tuple[str, int]] = []
    originals = {name: getattr(dist, name) for name in _COLLECTIVES}
    for name in originals:
        setattr(dist, name, _spy(name, sent))
    try:
        entry = tracker.gathered_state_dict()
    finally:
        for name, collective in originals.items():
            setattr(dist, name, collective)
    own = len(pickle.dumps(tracker.state_dict()))
    written = [entry]
    dist.broadcast_object_list(written, src=0)  # every rank reads the file rank 0 wrote
    saved = written[0]
    saved["ranks"][1 - rank] = None  # another rank's entry is not read at the saved world size
    resumed, again = Tracker(), _loader(rank)
    resumed.track_train_loader(again)
    resumed.load_state_dict(saved)
    return {
        "sent": sent,
        "own": own,
        "ranks_held": len(entry.get("ranks", [])),
        "exact": [batch[0].tolist() for batch in again] == [batch[0].tolist() for batch in rest],
    }


@functools.cache
def _two_ranks() -> list[dict[str, Any]]:
    return run_on_two_ranks(_save_and_resume)


def test_a_ranks_save_sends_only_its_own_entry_to_the_writer_in_one_gather() -> None:
    for result in _two_ranks():
        assert [name for name, _ in result["sent"]] == ["all_reduce", "gather"]  # the longest length, the entries
        [(_, longest), (_, sent)] = result["sent"]
        assert longest == 8
        assert sent <= 1.1 * result["own"]


def test_only_the_writer_holds_every_ranks_entry() -> None:
    assert [result["ranks_held"] for result in _two_ranks()] == [2, 0]


def test_each_rank_resumes_exactly_reading_only_its_own_entry_of_the_writers_file() -> None:
    assert [result["exact"] for result in _two_ranks()] == [True, True]
