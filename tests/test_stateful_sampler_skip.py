"""A 0-worker shuffling StatefulDataLoader resumes with its sampler moved past the consumed indices in one step.

torchdata's own load draws them one by one; the position hands torchdata the sampler at its start
and sets the place (tracker_core/data/_torch_compat.py: without_sampler_skip, skip_sampler). The
batches, the next epoch and the loader's own state must be the uninterrupted run's.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("torchdata")

import torch
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import RandomSampler

from tracker_core.data._position import LoaderPosition

from helpers.ids import Ids

SIZE = 20
BATCH = 3


def _loader(num_samples: int | None) -> StatefulDataLoader[Any]:
    """torchdata's own samplers (what ``shuffle=True`` builds), the sampler holding the generator."""
    sampler = RandomSampler(Ids(SIZE), num_samples=num_samples, generator=torch.Generator().manual_seed(1))
    return StatefulDataLoader(Ids(SIZE), batch_size=BATCH, sampler=sampler)


def _ids(batches: Any) -> list[list[int]]:
    return [batch.tolist() for batch in batches]


CASES = [(None, 1), (None, 4), (None, 6), (2 * SIZE + 5, 4), (2 * SIZE + 5, 8), (2 * SIZE + 5, 14)]


@pytest.mark.parametrize(("num_samples", "consumed"), CASES, ids=lambda value: str(value))
def test_a_resume_yields_the_uninterrupted_runs_batches_state_and_next_epoch(
    num_samples: int | None, consumed: int
) -> None:
    reference = _loader(num_samples)
    position = LoaderPosition(reference)
    batches = iter(reference)
    for _ in range(consumed + 1):  # one prefetched, as frameworks do
        next(batches)
    saved = position.state_dict(batches_consumed=consumed)
    expected_epoch = _ids(_loader(num_samples))[consumed:]

    resumed = _loader(num_samples)
    LoaderPosition(resumed).load_state_dict(saved)
    resumed_batches = iter(resumed)
    first = next(resumed_batches).tolist()
    assert [first, *_ids(resumed_batches)] == expected_epoch
    assert _ids(resumed) == _ids(_second_epoch(num_samples))


def test_after_a_resumed_batch_the_loaders_state_is_the_uninterrupted_runs() -> None:
    reference = _loader(None)
    position = LoaderPosition(reference)
    batches = iter(reference)
    for _ in range(5):
        next(batches)
    saved = position.state_dict(batches_consumed=4)
    resumed = _loader(None)
    LoaderPosition(resumed).load_state_dict(saved)
    next(iter(resumed))
    assert _plain(resumed.state_dict()) == _plain(reference.state_dict())


def _second_epoch(num_samples: int | None) -> list[torch.Tensor]:
    loader = _loader(num_samples)
    list(loader)
    return list(loader)


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    return value
