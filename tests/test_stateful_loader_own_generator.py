"""A shuffling StatefulDataLoader whose generator its sampler shares resumes the next epoch exactly.

``StatefulDataLoader(dataset, shuffle=True, generator=g)`` gives torchdata's ``RandomSampler`` the
loader's ``g``: building an iterator draws the permutation, then the workers' base seed, from it.
A 0-worker iterator loads its state after both draws, and the sampler sets ``g`` back to before its
permutation and draws it again: the base-seed draw is lost, so the next epoch's order differs
(torchdata 0.11 alone too). The position sets ``g`` back to its state at the checkpoint once the resumed
iterator is built (``g.set_state``, public).
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

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")

SIZE = 20
BATCH = 3


def _shuffled(workers: int = 0) -> StatefulDataLoader[Any]:
    return StatefulDataLoader(
        Ids(SIZE), batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(1), num_workers=workers
    )


def _over_permutations() -> StatefulDataLoader[Any]:
    """Its sampler draws three permutations an epoch from the loader's own generator."""
    generator = torch.Generator().manual_seed(1)
    sampler = RandomSampler(Ids(SIZE), num_samples=2 * SIZE + 5, generator=generator)
    return StatefulDataLoader(Ids(SIZE), batch_size=BATCH, sampler=sampler, generator=generator)


LOADERS = {"shuffle": _shuffled, "over-permutations": _over_permutations}


def _ids(batches: Any) -> list[list[int]]:
    return [batch.tolist() for batch in batches]


def _uninterrupted(build: Any) -> tuple[list[list[int]], list[list[int]], torch.Tensor]:
    loader = build()
    LoaderPosition(loader)
    first, second = _ids(loader), _ids(loader)
    return first, second, loader.generator.get_state()


def _resumed(build: Any, consumed: int) -> tuple[list[list[int]], list[list[int]], torch.Tensor]:
    saving = build()
    position = LoaderPosition(saving)
    batches = iter(saving)
    for _ in range(consumed):  # no batch prefetched: the loader's state is saved as it is (Ignite, a plain loop)
        next(batches)
    saved = position.state_dict(batches_consumed=consumed)
    del batches
    loader = build()
    LoaderPosition(loader).load_state_dict(saved)
    first, second = _ids(loader), _ids(loader)
    return first, second, loader.generator.get_state()


@pytest.mark.parametrize("consumed", [0, 1, 4, 6])
@pytest.mark.parametrize("name", list(LOADERS))
def test_a_shuffling_stateful_loader_with_its_own_generator_resumes_the_next_epoch_exactly(
    name: str, consumed: int
) -> None:
    first, second, generator = _uninterrupted(LOADERS[name])
    resumed_first, resumed_second, resumed_generator = _resumed(LOADERS[name], consumed)
    assert resumed_first == first[consumed:]
    assert resumed_second == second
    assert torch.equal(resumed_generator, generator)


def test_with_workers_the_shared_generator_is_left_as_the_uninterrupted_runs() -> None:
    build = lambda: _shuffled(workers=2)  # noqa: E731
    first, second, generator = _uninterrupted(build)
    resumed_first, resumed_second, resumed_generator = _resumed(build, 2)
    assert (resumed_first, resumed_second) == (first[2:], second)
    assert torch.equal(resumed_generator, generator)
