"""A StatefulDataLoader over one of torch's samplers that draw their order when iterated, with no state of their own
(``RandomSampler``, ``WeightedRandomSampler``, ``SubsetRandomSampler``), resumed mid-epoch: torchdata resumes such a
sampler by iterating it again, drawing another order from its RNG (its generator, else the global one) as the
checkpoint left it, so the rest of the epoch differs. Each is warned, naming the sampler, at the save and at the resume
(``InexactResumeWarning``); a subclass with a state of its own resumes exactly, unwarned.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("torchdata")

import torch
from torch.utils.data import BatchSampler, RandomSampler, Sampler, SubsetRandomSampler, WeightedRandomSampler
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import InexactResumeWarning
from tracker_core.data._position import LoaderPosition
from tracker_core.data._rng import GlobalRng

from helpers.ids import Ids

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")

SIZE = 12
BATCH = 3
SAVED_AFTER = 2  # batches of the second epoch


def _weighted(generator: torch.Generator | None) -> Sampler[int]:
    return WeightedRandomSampler([1.0] * SIZE, SIZE, generator=generator)


def _subset(generator: torch.Generator | None) -> Sampler[int]:
    return SubsetRandomSampler(list(range(SIZE)), generator=generator)


def _random(generator: torch.Generator | None) -> Sampler[int]:
    return RandomSampler(Ids(SIZE), generator=generator)


SAMPLERS: dict[str, Callable[[torch.Generator | None], Sampler[int]]] = {
    "WeightedRandomSampler": _weighted,
    "SubsetRandomSampler": _subset,
    "RandomSampler": _random,
}


class _OrderKept(WeightedRandomSampler):
    """A WeightedRandomSampler with a state of its own: its epoch's order and how much of it was read."""

    def __init__(self) -> None:
        super().__init__([1.0] * SIZE, SIZE)
        self.order: list[int] = []
        self.read = 0
        self.loaded = False

    def __iter__(self) -> Iterator[int]:
        if not self.loaded:
            self.order, self.read = list(super().__iter__()), 0
        self.loaded = False
        while self.read < len(self.order):
            self.read += 1
            yield self.order[self.read - 1]

    def state_dict(self) -> dict[str, Any]:
        return {"order": self.order, "read": self.read}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.order, self.read, self.loaded = list(state["order"]), state["read"], True


def _ids(loader: StatefulDataLoader[Any]) -> list[list[int]]:
    return [batch.tolist() for batch in loader]


def _run(build: Callable[[], StatefulDataLoader[Any]]) -> tuple[list[list[list[int]]], Any]:
    """Three epochs; the position and global RNGs saved after ``SAVED_AFTER`` batches of the second."""
    torch.manual_seed(0)
    loader = build()
    position = LoaderPosition(loader)
    epochs: list[list[list[int]]] = [_ids(loader)]
    batches = iter(loader)  # no batch prefetched: the loader's state is saved as it is (Ignite, a plain loop)
    second = [next(batches).tolist() for _ in range(SAVED_AFTER)]
    saved = (position.state_dict(batches_consumed=SAVED_AFTER), GlobalRng.capture())
    epochs += [second + [batch.tolist() for batch in batches], _ids(loader)]
    return epochs, saved


def _resumed(build: Callable[[], StatefulDataLoader[Any]], saved: Any) -> list[list[list[int]]]:
    torch.manual_seed(1234)
    loader = build()
    LoaderPosition(loader).load_state_dict(saved[0])
    saved[1].apply()
    return [_ids(loader), _ids(loader)]


@pytest.mark.parametrize("own_generator", [False, True], ids=["global-rng", "own-generator"])
@pytest.mark.parametrize(("name", "workers"), [(name, 0) for name in SAMPLERS] + [("WeightedRandomSampler", 2)])
def test_torchs_sampler_drawn_when_iterated_warns_naming_it_at_a_mid_epoch_save_and_its_resume(
    name: str, workers: int, own_generator: bool
) -> None:
    def build() -> StatefulDataLoader[Any]:
        generator = torch.Generator().manual_seed(5) if own_generator else None
        return StatefulDataLoader(Ids(SIZE), batch_size=BATCH, sampler=SAMPLERS[name](generator), num_workers=workers)

    message = f"mid-epoch by its own state: its {name} has no state of its own"
    with pytest.warns(InexactResumeWarning, match=f"^saving .* {message}"):
        epochs, saved = _run(build)
    with pytest.warns(InexactResumeWarning, match=f"^resuming .* {message}"):
        resumed = _resumed(build, saved)
    assert len(resumed[0]) == len(epochs[1]) - SAVED_AFTER  # its position stays exact; its order does not
    assert resumed[0] != epochs[1][SAVED_AFTER:]
    assert resumed[1] == epochs[2]


def test_torchs_sampler_under_a_batch_sampler_of_torchs_warns_naming_it() -> None:
    def build() -> StatefulDataLoader[Any]:
        return StatefulDataLoader(Ids(SIZE), batch_sampler=BatchSampler(_subset(None), BATCH, drop_last=False))

    message = "mid-epoch by its own state: its SubsetRandomSampler has no state of its own"
    with pytest.warns(InexactResumeWarning, match=f"^saving .* {message}"):
        _epochs, saved = _run(build)
    with pytest.warns(InexactResumeWarning, match=f"^resuming .* {message}"):
        _resumed(build, saved)


def test_a_subclass_of_torchs_sampler_with_a_state_of_its_own_resumes_exactly_without_a_warning() -> None:
    def build() -> StatefulDataLoader[Any]:
        return StatefulDataLoader(Ids(SIZE), batch_size=BATCH, sampler=_OrderKept())

    with warnings.catch_warnings():
        warnings.simplefilter("error", InexactResumeWarning)
        epochs, saved = _run(build)
        resumed = _resumed(build, saved)
    assert resumed == [epochs[1][SAVED_AFTER:], epochs[2]]
