"""LoaderPosition: the rule of each loader kind.

* A loader with its own state (torchdata's ``StatefulDataLoader``): a run killed at any batch resumes at exactly the
  next batch, in the same order.
* A plain torch ``DataLoader``: nothing is installed on it. Saved between epochs, it resumes exactly (its generators
  and the global RNGs restored, the next epoch is drawn as in the uninterrupted run); saved inside an epoch, the save
  and the resume warn ``InexactResumeWarning``, naming ``StatefulDataLoader``, and the resumed epoch is read by the
  framework's own rule (here, a loop that builds a fresh iterator: the epoch from its first batch).

The resume tests drive 3 epochs like a framework does: one batch prefetched ahead of the
training step, and one draw per step from each global RNG (torch, random, numpy: "dropout").
After every step of epoch 2 they save ``state_dict(batches_consumed=k, in_epoch=...)`` and
``GlobalRng.capture().to_plain()``. A fresh loader, built under another seed, then loads a state
(after a JSON round trip).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import functools
import io
import itertools
import json
import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

pytest.importorskip("numpy")
pytest.importorskip("torchdata")

import numpy as np
import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    get_worker_info,
)
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core._errors import InexactResumeWarning, ProgressStateError
from tracker_core.data._position import LoaderPosition
from tracker_core.data._rng import GlobalRng

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")


# --- datasets ----------------------------------------------------------------------------


class _Indexed(Dataset[int]):
    """Map-style: sample ``i`` is ``i``. Notes the indices it loads (in this process)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.loaded: list[int] = []

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        self.loaded.append(index)
        return index


class _Stream(IterableDataset[int]):
    """``0..size-1`` in a fixed order, split across workers (deterministic per epoch)."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __iter__(self) -> Any:
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        return iter(range(worker, self.size, workers))


class _WorkerShuffledStream(_Stream):
    """Each worker yields its share in an order drawn from its own, loader-seeded torch RNG."""

    def __iter__(self) -> Any:
        share = list(super().__iter__())
        return iter([share[i] for i in torch.randperm(len(share)).tolist()])


# --- loader setups -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Setup:
    name: str
    build: Callable[[], DataLoader[Any]]
    batches: int  # per epoch
    shuffled: bool
    set_epoch: bool = False  # the framework calls sampler.set_epoch (DistributedSampler)
    # a loader with its own state is saved as it is at the checkpoint: a loop that does not prefetch (Ignite's)
    prefetch: bool = True


def _distributed() -> DataLoader[Any]:
    dataset = _Indexed(17)
    return DataLoader(dataset, batch_size=3, sampler=DistributedSampler(dataset, num_replicas=2, rank=1, seed=3))


class _EveryOtherBatch(BatchSampler):
    """A wrapper nesting the user's batch sampler one level deeper, as Accelerate's BatchSamplerShard does."""

    def __init__(self, batch_sampler: BatchSampler) -> None:
        self.batch_sampler = batch_sampler

    def __iter__(self) -> Any:
        return itertools.islice(self.batch_sampler, 1, None, 2)

    def __len__(self) -> int:
        return len(self.batch_sampler) // 2


def _nested() -> DataLoader[Any]:
    dataset = _Indexed(17)
    sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(4))
    return DataLoader(dataset, batch_sampler=_EveryOtherBatch(BatchSampler(sampler, 2, drop_last=False)))


def _nested_distributed() -> DataLoader[Any]:
    dataset = _Indexed(17)
    sampler: DistributedSampler[int] = DistributedSampler(dataset, num_replicas=2, rank=0, seed=5)
    return DataLoader(dataset, batch_sampler=_EveryOtherBatch(BatchSampler(sampler, 2, drop_last=False)))


def _over_torchs_random_sampler(*, persistent_workers: bool) -> DataLoader[Any]:
    """A StatefulDataLoader whose order torch's own RandomSampler draws (no state of its own), with 2 workers."""
    data = _Indexed(10)
    sampler = RandomSampler(data)
    return StatefulDataLoader(data, batch_size=3, sampler=sampler, num_workers=2, persistent_workers=persistent_workers)


SETUPS = [
    _Setup("map-in-order", lambda: DataLoader(_Indexed(11), batch_size=3), 4, shuffled=False),
    _Setup("map-shuffled", lambda: DataLoader(_Indexed(13), batch_size=4, shuffle=True), 4, shuffled=True),
    _Setup(
        "map-shuffled-drop-last",
        lambda: DataLoader(_Indexed(14), batch_size=4, shuffle=True, drop_last=True),
        3,
        shuffled=True,
    ),
    _Setup(
        "map-shuffled-own-generator",
        lambda: DataLoader(_Indexed(10), batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(7)),
        4,
        shuffled=True,
    ),
    _Setup("map-unbatched-shuffled", lambda: DataLoader(_Indexed(7), batch_size=None, shuffle=True), 7, shuffled=True),
    _Setup("map-distributed-sampler", _distributed, 3, shuffled=True, set_epoch=True),
    _Setup("map-nested-batch-sampler-own-generator", _nested, 4, shuffled=True),
    _Setup("map-nested-distributed-sampler", _nested_distributed, 2, shuffled=True, set_epoch=True),
    _Setup(
        "map-shuffled-2-workers",
        lambda: DataLoader(_Indexed(10), batch_size=3, shuffle=True, num_workers=2),
        4,
        shuffled=True,
    ),
    _Setup("iterable", lambda: DataLoader(_Stream(11), batch_size=3), 4, shuffled=False),
    _Setup(
        "iterable-worker-shuffled-2-workers",
        lambda: DataLoader(_WorkerShuffledStream(10), batch_size=3, num_workers=2),
        4,
        shuffled=True,
    ),
    _Setup(
        "iterable-worker-shuffled-own-generator-2-workers",
        lambda: DataLoader(
            _WorkerShuffledStream(10), batch_size=3, num_workers=2, generator=torch.Generator().manual_seed(7)
        ),
        4,
        shuffled=True,
    ),
    _Setup(
        "map-shuffled-2-persistent-workers",
        lambda: DataLoader(_Indexed(10), batch_size=4, shuffle=True, num_workers=2, persistent_workers=True),
        3,
        shuffled=True,
    ),
    _Setup(
        "stateful-shuffled",
        lambda: StatefulDataLoader(_Indexed(13), batch_size=4, shuffle=True),
        4,
        shuffled=True,
        prefetch=False,
    ),
    _Setup(
        "stateful-shuffled-2-workers",
        lambda: StatefulDataLoader(_Indexed(10), batch_size=3, shuffle=True, num_workers=2),
        4,
        shuffled=True,
        prefetch=False,
    ),
    _Setup(
        "stateful-shuffled-2-persistent-workers",
        lambda: StatefulDataLoader(_Indexed(10), batch_size=4, shuffle=True, num_workers=2, persistent_workers=True),
        3,
        shuffled=True,
        prefetch=False,
    ),
    _Setup(
        "stateful-torch-sampler-2-workers",
        lambda: _over_torchs_random_sampler(persistent_workers=False),
        4,
        shuffled=True,
        prefetch=False,
    ),
    _Setup(
        "stateful-iterable", lambda: StatefulDataLoader(_Stream(11), batch_size=3), 4, shuffled=False, prefetch=False
    ),
]
BY_NAME = {setup.name: setup for setup in SETUPS}
_MAP = "map-shuffled-own-generator"  # a plain map-style setup whose state has every part
_STATEFUL = "stateful-shuffled"
# Plain loaders without persistent workers: exact between epochs (persistent workers: the last test section).
_PERSISTENT = "map-shuffled-2-persistent-workers"
PLAIN = [pytest.param(s, id=s.name) for s in SETUPS if not s.name.startswith("stateful") and s.name != _PERSISTENT]
# torch's own RandomSampler (no state of its own) inside a StatefulDataLoader with workers: its order is drawn again
# at the resumed build, from the global RNG as the checkpoint left it (a trade, warned).
_TORCH_SAMPLER = "stateful-torch-sampler-2-workers"
STATEFUL_POSITIONS = [
    pytest.param(setup, k, id=f"{setup.name}-k{k}")
    for setup in SETUPS
    if setup.name.startswith("stateful")
    for k in range(setup.batches + 1)
    if setup.name != _TORCH_SAMPLER or k == setup.batches  # inside its epoch, its order is drawn again (a trade)
]
_OPT_IN = "use torchdata's StatefulDataLoader"


# --- a framework-like training loop --------------------------------------------------------

EPOCHS = 3
SAVED_EPOCH = 1  # epoch 2 of 3, counted from 0


@dataclass
class _Run:
    batches: list[list[list[int]]] = field(default_factory=list)  # [epoch][batch] -> sample ids
    draws: list[list[tuple[float, float, float]]] = field(default_factory=list)  # [epoch][step]
    saved: dict[int, tuple[dict[str, Any], dict[str, Any]]] = field(default_factory=dict)  # k -> states


def _seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)


def _train(
    setup: _Setup,
    loader: DataLoader[Any],
    position: LoaderPosition,
    epochs: range,
    *,
    consumed_before: int = 0,
    save_in: int | None = None,
) -> _Run:
    """Run epochs (one batch prefetched, if ``setup.prefetch``); save after each step of epoch ``save_in``, and at its
    start once its iterator is built (``in_epoch`` until its last batch, as the Tracker passes it).

    ``consumed_before`` is the step count the first epoch resumes at (progress counters).
    """
    run = _Run()
    for epoch in epochs:
        if setup.set_epoch:  # the framework's rule: it sets a DistributedSampler's epoch, the tracker does not
            nested = getattr(loader.batch_sampler, "batch_sampler", None)
            for sampler in (loader.sampler, getattr(nested, "sampler", None)):
                if isinstance(sampler, DistributedSampler):
                    sampler.set_epoch(epoch)
        consumed = consumed_before if epoch == epochs[0] else 0
        ids: list[list[int]] = []
        draws: list[tuple[float, float, float]] = []
        batches = iter(loader)
        ahead = [next(batches, None)] if setup.prefetch else []

        def save(count: int) -> None:
            # between epochs, 0 (as the Tracker saves it: an iterable's length is unknown)
            state = position.state_dict(batches_consumed=count % setup.batches, in_epoch=count < setup.batches)
            run.saved[count] = (state, GlobalRng.capture().to_plain())

        if epoch == save_in:
            save(consumed)
        while (batch := ahead.pop() if ahead else next(batches, None)) is not None:
            if setup.prefetch:
                ahead.append(next(batches, None))
            ids.append(torch.as_tensor(batch).reshape(-1).tolist())
            draws.append((torch.rand(()).item(), random.random(), float(np.random.rand())))
            consumed += 1
            if epoch == save_in:
                save(consumed)
        run.batches.append(ids)
        run.draws.append(draws)
    return run


@functools.cache
def _uninterrupted(setup: _Setup) -> _Run:
    _seed_all(0)
    loader = setup.build()
    with warnings.catch_warnings():  # a plain loader's mid-epoch saves warn (tested below)
        warnings.simplefilter("ignore", InexactResumeWarning)
        return _train(setup, loader, LoaderPosition(loader), range(EPOCHS), save_in=SAVED_EPOCH)


def _json(state: dict[str, Any]) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(json.dumps(state))
    return loaded


def _resume(
    setup: _Setup, k: int, saved: tuple[dict[str, Any], dict[str, Any]], epochs: range | None = None, **options: Any
) -> _Run:
    """A fresh process: other seed, new dataset and loader; load the position, then the RNGs; train ``epochs`` (from
    the saved one, by default)."""
    _seed_all(12345)
    loader = setup.build()
    position = LoaderPosition(loader)
    state, rng = saved
    position.load_state_dict(_json(state))
    GlobalRng.from_plain(_json(rng)).apply()
    epochs = range(SAVED_EPOCH, EPOCHS) if epochs is None else epochs
    return _train(setup, loader, position, epochs, consumed_before=k, **options)


def _positioned(setup: _Setup) -> tuple[DataLoader[Any], LoaderPosition]:
    loader = setup.build()
    return loader, LoaderPosition(loader)


def _epoch_ids(batches: list[list[int]]) -> list[int]:
    return [i for batch in batches for i in batch]


@pytest.mark.parametrize("setup", [pytest.param(s, id=s.name) for s in SETUPS])
def test_uninterrupted_epochs_yield_each_sample_at_most_once_and_shuffled_ones_reshuffle(setup: _Setup) -> None:
    full = _uninterrupted(setup)
    for epoch in full.batches:
        ids = _epoch_ids(epoch)
        assert len(epoch) == setup.batches
        assert len(ids) == len(set(ids))
    if setup.shuffled:
        assert full.batches[0] != full.batches[1] != full.batches[2]


# --- a loader with its own state: exact at every batch -------------------------------------


@pytest.mark.parametrize(("setup", "k"), STATEFUL_POSITIONS)
def test_a_stateful_loader_resumed_after_k_batches_yields_the_rest_of_that_epoch_then_the_same_next_epoch(
    setup: _Setup, k: int
) -> None:
    full = _uninterrupted(setup)
    resumed = _resume(setup, k, full.saved[k])
    assert full.batches[SAVED_EPOCH][:k] + resumed.batches[0] == full.batches[SAVED_EPOCH]
    assert resumed.batches[1] == full.batches[SAVED_EPOCH + 1]
    assert resumed.draws == [full.draws[SAVED_EPOCH][k:], full.draws[SAVED_EPOCH + 1]]


@pytest.mark.parametrize("k", range(BY_NAME[_TORCH_SAMPLER].batches))
def test_torchs_random_sampler_with_workers_inside_a_stateful_loader_warns_at_a_save_and_its_resume(k: int) -> None:
    setup = BY_NAME[_TORCH_SAMPLER]
    message = "mid-epoch by its own state: its RandomSampler has no state of its own"
    _seed_all(0)
    with pytest.warns(InexactResumeWarning, match=f"^saving .* {message}"):
        full = _train(setup, *_positioned(setup), range(EPOCHS), save_in=SAVED_EPOCH)
    # before the first batch, a resume cannot tell the epoch's state from one saved at its end: only the save warns
    resuming = pytest.warns(InexactResumeWarning, match=f"^resuming .* {message}") if k else contextlib.nullcontext()
    with resuming:
        resumed = _resume(setup, k, full.saved[k])
    assert len(resumed.batches[0]) == setup.batches - k  # its position stays exact; its order does not
    assert resumed.draws == [full.draws[SAVED_EPOCH][k:], full.draws[SAVED_EPOCH + 1]]  # nor do later draws
    assert resumed.batches[1] != full.batches[SAVED_EPOCH + 1] or resumed.batches[0] != full.batches[SAVED_EPOCH][k:]


def test_persistent_workers_over_torchs_random_sampler_warn_at_a_save_and_its_resume_in_a_later_epoch() -> None:
    # Their iterator is reset for each later epoch, drawing its order from the global RNG unseen by the position;
    # the resume draws it again from the RNG as restored.
    setup = _Setup(
        "persistent", lambda: _over_torchs_random_sampler(persistent_workers=True), 4, shuffled=True, prefetch=False
    )
    message = "mid-epoch by its own state: its RandomSampler has no state of its own"
    with pytest.warns(InexactResumeWarning, match=f"^saving .* {message}"):
        saved = _train(setup, *_positioned(setup), range(EPOCHS), save_in=SAVED_EPOCH).saved[2]
    with pytest.warns(InexactResumeWarning, match=f"^resuming .* {message}"):
        _resume(setup, 2, saved)


def test_persistent_workers_over_torchs_random_sampler_warn_at_a_save_and_its_resume_in_their_first_epoch() -> None:
    setup = _Setup(
        "persistent", lambda: _over_torchs_random_sampler(persistent_workers=True), 4, shuffled=True, prefetch=False
    )
    message = "mid-epoch by its own state: its RandomSampler has no state of its own"
    _seed_all(0)
    with pytest.warns(InexactResumeWarning, match=f"^saving .* {message}"):
        full = _train(setup, *_positioned(setup), range(1), save_in=0)
    _seed_all(12345)
    loader, position = _positioned(setup)
    with pytest.warns(InexactResumeWarning, match=f"^resuming .* {message}"):
        position.load_state_dict(_json(full.saved[2][0]))
    assert len(list(itertools.islice(loader, 2))) == 2  # its position stays exact; its order does not


@pytest.mark.parametrize("name", ["stateful-shuffled", "stateful-shuffled-2-persistent-workers"])
def test_a_second_checkpoint_inside_the_resumed_epoch_resumes_exactly_too(name: str) -> None:
    setup = BY_NAME[name]
    full = _uninterrupted(setup)
    first = _resume(setup, 1, full.saved[1], save_in=SAVED_EPOCH)
    again = _resume(setup, 2, first.saved[2])
    assert again.batches == [full.batches[SAVED_EPOCH][2:], full.batches[SAVED_EPOCH + 1]]
    assert again.draws == [full.draws[SAVED_EPOCH][2:], full.draws[SAVED_EPOCH + 1]]


def test_a_mid_epoch_save_after_a_resume_that_read_a_stateful_loaders_batches_again_warns_that_torchdata_skips() -> (
    None
):
    # torchdata 0.11 counts the batches it read again twice in the resumed loader's state
    setup = BY_NAME["stateful-iterable"]
    full = _uninterrupted(setup)
    with pytest.warns(InexactResumeWarning, match="counts those batches twice") as caught:
        resumed = _resume(setup, 1, full.saved[1], save_in=SAVED_EPOCH)
    mid_epoch = [k for k in resumed.saved if k < setup.batches]
    assert len([w for w in caught if "twice" in str(w.message)]) == len(mid_epoch)  # at each mid-epoch save
    again = _resume(setup, 2, resumed.saved[2])
    assert again.batches[0] == full.batches[SAVED_EPOCH][3:]  # the batch at index 2 is skipped


@pytest.mark.parametrize("name", [_MAP, _PERSISTENT, _STATEFUL])
def test_a_state_saved_before_the_first_epoch_resumes_exactly_without_a_warning(name: str) -> None:
    setup = BY_NAME[name]
    _seed_all(0)
    loader, position = _positioned(setup)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InexactResumeWarning)  # persistent workers not started yet
        saved = (position.state_dict(batches_consumed=0), GlobalRng.capture().to_plain())
    full = _train(setup, loader, position, range(2))
    _seed_all(12345)
    loader, position = _positioned(setup)
    position.load_state_dict(_json(saved[0]))
    GlobalRng.from_plain(_json(saved[1])).apply()
    assert _train(setup, loader, position, range(2)).batches == full.batches


def test_a_stateful_state_saved_between_iter_and_the_first_batch_resumes_exactly() -> None:
    setup = BY_NAME[_STATEFUL]
    _seed_all(0)
    loader, position = _positioned(setup)
    _train(setup, loader, position, range(1))
    batches = iter(loader)
    saved = (position.state_dict(batches_consumed=0, in_epoch=True), GlobalRng.capture().to_plain())
    expected = [torch.as_tensor(b).tolist() for b in batches]
    _seed_all(12345)
    loader = setup.build()
    LoaderPosition(loader).load_state_dict(_json(saved[0]))
    GlobalRng.from_plain(_json(saved[1])).apply()
    assert [torch.as_tensor(b).tolist() for b in loader] == expected


def test_a_resumed_stateful_map_style_epoch_never_loads_the_skipped_samples() -> None:
    setup = BY_NAME[_STATEFUL]
    full = _uninterrupted(setup)
    _seed_all(12345)
    loader, position = _positioned(setup)
    position.load_state_dict(_json(full.saved[3][0]))
    _train(setup, loader, position, range(SAVED_EPOCH, SAVED_EPOCH + 1), consumed_before=3)
    assert loader.dataset.loaded == full.batches[SAVED_EPOCH][3]  # type: ignore[attr-defined]


def test_a_stateful_loader_with_workers_returning_batches_out_of_order_is_refused() -> None:
    with pytest.raises(ValueError, match="in_order=False"):
        LoaderPosition(StatefulDataLoader(_Indexed(10), batch_size=3, num_workers=2, in_order=False))


# --- a plain loader: nothing installed, exact between epochs, warned inside one ------------


@pytest.mark.parametrize("setup", PLAIN)
def test_a_plain_loader_gets_nothing_installed_and_its_position_is_still_found(setup: _Setup) -> None:
    loader = setup.build()
    before = dict(vars(loader))
    position = LoaderPosition(loader)
    assert vars(loader) == before and all(vars(loader)[name] is value for name, value in before.items())
    assert "_get_iterator" not in vars(loader)
    assert LoaderPosition.of(loader) is position and position.kind == "plain"
    assert len(list(loader)) == setup.batches


@pytest.mark.parametrize("setup", PLAIN)
def test_a_plain_loader_resumed_at_an_epoch_end_yields_the_same_next_epoch_and_draws(setup: _Setup) -> None:
    full = _uninterrupted(setup)
    end = full.saved[setup.batches]  # saved after the last step of the epoch, no warning
    assert end[0]["epoch"] is None
    resumed = _resume(setup, 0, end, range(SAVED_EPOCH + 1, EPOCHS))
    assert resumed.batches == full.batches[SAVED_EPOCH + 1 :]
    assert resumed.draws == full.draws[SAVED_EPOCH + 1 :]


@pytest.mark.parametrize("setup", PLAIN)
def test_a_plain_loader_saved_mid_epoch_warns_at_save_and_resume_and_the_resume_reads_a_whole_epoch(
    setup: _Setup,
) -> None:
    k = 1
    _seed_all(0)
    with pytest.warns(InexactResumeWarning, match=f"^saving DataLoader .* after {k} batches of an epoch: .*{_OPT_IN}"):
        saved = _train(setup, *_positioned(setup), range(SAVED_EPOCH + 1), save_in=SAVED_EPOCH).saved[k]
    with pytest.warns(
        InexactResumeWarning, match=f"^resuming DataLoader .* after {k} batches of an epoch: .*{_OPT_IN}"
    ):
        resumed = _resume(setup, k, saved, range(SAVED_EPOCH, SAVED_EPOCH + 1))
    epoch = resumed.batches[0]  # the loop built a fresh iterator: the epoch from its first batch
    assert len(epoch) == setup.batches
    assert len(_epoch_ids(epoch)) == len(set(_epoch_ids(epoch)))
    if not setup.shuffled:
        assert epoch == _uninterrupted(setup).batches[SAVED_EPOCH]


def test_a_plain_loader_counted_past_its_epochs_length_saves_as_inside_the_epoch_without_raising() -> None:
    # A loop that reads a plain loader whole after a mid-epoch resume counts k + N batches in that epoch.
    loader, resumed = DataLoader(range(8), batch_size=2), DataLoader(range(8), batch_size=2)
    with pytest.warns(InexactResumeWarning, match="^saving DataLoader .* after 6 batches of an epoch"):
        state = LoaderPosition(loader).state_dict(batches_consumed=6, in_epoch=True)
    assert (state["batches_consumed"], state["epoch"]) == (4, {})
    with pytest.warns(InexactResumeWarning, match="^resuming DataLoader .* after 4 batches of an epoch"):
        LoaderPosition(resumed).load_state_dict(state)


def test_a_shuffled_plain_loader_saved_at_batch_0_after_its_iterator_was_built_warns_at_save_and_resume() -> None:
    # iter() drew the epoch's seeds already: a resume builds another iterator, drawing them again (another order).
    setup = BY_NAME["map-shuffled"]
    full = _uninterrupted(setup)
    _seed_all(0)
    loader, position = _positioned(setup)
    _train(setup, loader, position, range(SAVED_EPOCH))
    batches = iter(loader)
    with pytest.warns(InexactResumeWarning, match="^saving .* in an epoch whose iterator may already be built: "):
        saved = (position.state_dict(batches_consumed=0, in_epoch=True), GlobalRng.capture().to_plain())
    assert [torch.as_tensor(b).tolist() for b in batches] == full.batches[SAVED_EPOCH]
    with pytest.warns(InexactResumeWarning, match="^resuming .* in an epoch whose iterator may already be built"):
        resumed = _resume(setup, 0, saved, range(SAVED_EPOCH, SAVED_EPOCH + 1))
    assert len(resumed.batches[0]) == setup.batches
    assert resumed.batches[0] != full.batches[SAVED_EPOCH]  # inexact, as warned


def test_a_plain_loader_with_persistent_workers_started_warns_at_every_save_even_between_epochs() -> None:
    # Its workers keep their seeds and their iterator across epochs; a resumed process starts new ones.
    setup = BY_NAME[_PERSISTENT]
    _seed_all(0)
    loader, position = _positioned(setup)
    _train(setup, loader, position, range(1))
    with pytest.warns(InexactResumeWarning, match="^saving .* with persistent workers started: ") as caught:
        position.state_dict(batches_consumed=0)
    assert len(caught) == 1
    full = _uninterrupted(setup)
    resumed = _resume(setup, 0, full.saved[setup.batches], range(SAVED_EPOCH + 1, EPOCHS))
    assert resumed.batches != full.batches[SAVED_EPOCH + 1 :]  # inexact, as warned


def test_a_distributed_samplers_epoch_is_set_by_the_framework_not_restored_by_the_position() -> None:
    # The framework's rule: it calls sampler.set_epoch(epoch) before each epoch (Lightning, Ignite and Accelerate do),
    # so the position saves no sampler epoch; a resume between epochs is exact once the framework sets it.
    setup = BY_NAME["map-distributed-sampler"]
    full = _uninterrupted(setup)
    _seed_all(12345)
    loader, position = _positioned(setup)
    position.load_state_dict(_json(full.saved[setup.batches][0]))
    assert loader.sampler.epoch == 0  # type: ignore[attr-defined]
    loader.sampler.set_epoch(SAVED_EPOCH + 1)  # type: ignore[attr-defined]
    assert [torch.as_tensor(b).tolist() for b in loader] == full.batches[SAVED_EPOCH + 1]


@pytest.mark.parametrize("old", ["sampler_replay", "iterable_replay", "stateful_dataloader", "own_state"])
def test_a_state_of_an_earlier_version_is_refused_naming_its_version_before_its_kind(old: str) -> None:
    setup = BY_NAME[_MAP]
    earlier = {**_json(_uninterrupted(setup).saved[2][0]), "version": 2, "kind": old}
    _loader, position = _positioned(setup)
    with pytest.raises(ProgressStateError, match="written by a development build; this release reads version 3") as e:
        position.load_state_dict(earlier)
    assert e.value.key == "version"


def test_generators_are_found_at_any_depth_of_the_sampler_chain_each_once() -> None:
    loader = _nested_distributed()
    inner = loader.batch_sampler.batch_sampler.sampler  # type: ignore[union-attr]
    inner.generator = torch.Generator()
    loader.batch_sampler.sampler = loader.batch_sampler  # type: ignore[union-attr]  # a cycle
    position = LoaderPosition(loader)
    list(loader)
    state = position.state_dict(batches_consumed=0)
    assert list(state["generators"]) == ["batch_sampler.batch_sampler.sampler.generator"]


# --- the state is plain data ---------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [_MAP, "map-distributed-sampler", "iterable-worker-shuffled-2-workers", "stateful-shuffled-2-workers"],
)
def test_state_round_trips_through_json_and_torch_load_weights_only(name: str) -> None:
    state, rng = _uninterrupted(BY_NAME[name]).saved[2]
    for saved in (state, rng):
        assert _json(saved) == saved
        buffer = io.BytesIO()
        torch.save(saved, buffer)
        buffer.seek(0)
        assert torch.load(buffer, weights_only=True) == saved


def test_state_names_the_mechanism_of_each_loader_kind() -> None:
    expected = {"map-shuffled": "plain", "iterable": "plain", "stateful-shuffled": "own_state"}
    assert {name: _uninterrupted(BY_NAME[name]).saved[0][0]["kind"] for name in expected} == expected


# --- bad states ----------------------------------------------------------------------------


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], Any]:
    def mutate(state: dict[str, Any]) -> Any:
        *parents, last = path.split("/")
        node = state
        for name in parents:
            node = node[name]
        node[last] = value
        return state

    return mutate


def _delete(path: str) -> Callable[[dict[str, Any]], Any]:
    def mutate(state: dict[str, Any]) -> Any:
        *parents, last = path.split("/")
        node = state
        for name in parents:
            node = node[name]
        del node[last]
        return state

    return mutate


_B64_SHORT = base64.b64encode(b"abc").decode()
_SDL_TENSOR = "epoch/loader_state/_sampler_iter_state/sampler_iter_state/generator/__tensor__/data"
BAD_STATES = [
    # (id, setup, mutation, key named by the error)
    ("missing-key", _MAP, _delete("batches_consumed"), "batches_consumed"),
    ("missing-nested-key", "map-distributed-sampler", _delete("distributed/seed"), "distributed.seed"),
    ("missing-generator", _MAP, _delete("generators/generator"), "generators.generator"),
    ("unknown-key", _MAP, _set("cursor", 3), "cursor"),
    ("unknown-nested-key", _MAP, _set("epoch/note", "x"), "epoch.note"),
    ("wrong-type", _MAP, _set("batches_consumed", "2"), "batches_consumed"),
    ("bool-for-int", _MAP, _set("num_workers", True), "num_workers"),
    ("wrong-nested-type", "map-distributed-sampler", _set("distributed/num_replicas", "2"), "distributed.num_replicas"),
    ("negative-count", _MAP, _set("batches_consumed", -1), "batches_consumed"),
    ("count-beyond-epoch", _MAP, _set("batches_consumed", 5), "batches_consumed"),
    ("other-epoch-length", _MAP, _set("batches_per_epoch", 9), "batches_per_epoch"),
    ("unknown-kind", _MAP, _set("kind", "tape"), "kind"),
    ("kind-of-another-loader", _MAP, _set("kind", "own_state"), "kind"),
    ("newer-version", _MAP, _set("version", 4), "version"),
    ("bad-base64", _MAP, _set("generators/generator", "%%%"), "generators.generator"),
    ("truncated-generator-state", _MAP, _set("generators/generator", _B64_SHORT), "generators.generator"),
    ("other-distributed-seed", "map-distributed-sampler", _set("distributed/seed", 4), "distributed.seed"),
    ("other-distributed-rank", "map-distributed-sampler", _set("distributed/rank", 0), "distributed.rank"),
    ("distributed-shuffle-not-bool", "map-distributed-sampler", _set("distributed/shuffle", 1), "distributed.shuffle"),
    ("other-worker-count", "stateful-shuffled-2-workers", _set("num_workers", 0), "num_workers"),
    ("loader-state-not-a-mapping", _STATEFUL, _set("epoch/loader_state", 7), "epoch.loader_state"),
    ("bad-tensor-in-loader-state", _STATEFUL, _set(_SDL_TENSOR, _B64_SHORT), _SDL_TENSOR.replace("/", ".")),
    ("loader-state-of-another-class", _STATEFUL, _set("epoch/loader_class", "x.Other"), "epoch.loader_class"),
    ("loader-state-without-its-class", _STATEFUL, _delete("epoch/loader_class"), "epoch.loader_class"),
    ("saved-by-an-earlier-version", _STATEFUL, _set("version", 2), "version"),
    ("not-a-mapping", "map-shuffled", lambda state: [state], ""),
]


def _next_epoch_after(setup: _Setup, attempt: Callable[[LoaderPosition], None]) -> list[list[int]]:
    _seed_all(5)
    loader, position = _positioned(setup)
    _train(setup, loader, position, range(1))
    attempt(position)
    return _train(setup, loader, position, range(1, 2)).batches[0]


@pytest.mark.parametrize(("name", "mutate", "key"), [pytest.param(*case[1:], id=case[0]) for case in BAD_STATES])
def test_a_bad_state_raises_naming_its_key_and_changes_nothing(
    name: str, mutate: Callable[[dict[str, Any]], Any], key: str
) -> None:
    setup = BY_NAME[name]
    bad = mutate(copy.deepcopy(_uninterrupted(setup).saved[2][0]))

    def load_bad(position: LoaderPosition) -> None:
        before = position.state_dict(batches_consumed=setup.batches)
        with pytest.raises(ProgressStateError) as caught:
            position.load_state_dict(bad)
        assert caught.value.key == key
        assert repr(key if key else "<root>") in str(caught.value)
        assert position.state_dict(batches_consumed=setup.batches) == before

    assert _next_epoch_after(setup, load_bad) == _next_epoch_after(setup, lambda position: None)


def test_state_dict_refuses_counts_an_epoch_cannot_have() -> None:
    loader = StatefulDataLoader(_Indexed(10), batch_size=3, shuffle=True)
    position = LoaderPosition(loader)
    with pytest.raises(ValueError, match=">= 0"):
        position.state_dict(batches_consumed=-1)
    with pytest.raises(TypeError):
        position.state_dict(batches_consumed=1.0)  # type: ignore[arg-type]


def test_a_count_past_a_stateful_loaders_length_is_saved_within_its_pass_in_flight() -> None:
    loader = StatefulDataLoader(_Indexed(10), batch_size=3, shuffle=True)  # 4 batches
    position = LoaderPosition(loader)
    state = position.state_dict(batches_consumed=6, in_epoch=True)  # the framework read it again in its epoch
    assert state["batches_consumed"] == 2


def test_a_loader_takes_one_position_only() -> None:
    loader = DataLoader(_Indexed(10), batch_size=3)
    first = LoaderPosition(loader)
    with pytest.raises(ValueError, match="already"):
        LoaderPosition(loader)
    assert first.loader is loader


def test_the_loader_keeps_its_position_alive() -> None:
    loader = DataLoader(_Indexed(10), batch_size=3, shuffle=True)
    LoaderPosition(loader)  # only the loader refers to it from here on
    list(loader)
    with pytest.raises(ValueError, match="already"):
        LoaderPosition(loader)


# --- global RNG snapshots ------------------------------------------------------------------


def _draws() -> list[float]:
    return [torch.rand(()).item(), random.random(), float(np.random.rand()), random.gauss(0.0, 1.0)]


def test_a_restored_rng_snapshot_continues_the_torch_python_and_numpy_streams() -> None:
    _seed_all(3)
    random.gauss(0.0, 1.0)  # leaves a cached gaussian in Python's state
    saved = GlobalRng.capture().to_plain()
    expected = _draws()
    _seed_all(4)
    GlobalRng.from_plain(_json(saved)).apply()
    assert _draws() == expected


BAD_RNG_STATES = [
    ("missing-key", _delete("python"), "python"),
    ("unknown-key", _set("cuda", []), "cuda"),
    ("wrong-type", _set("torch", 5), "torch"),
    ("truncated-torch-state", _set("torch", _B64_SHORT), "torch"),
    ("truncated-python-words", _set("python/words", _B64_SHORT), "python.words"),
    ("negative-numpy-pos", _set("numpy/pos", -1), "numpy.pos"),
    ("newer-version", _set("version", 3), "version"),
    ("development-build-version", _set("version", 1), "version"),
]


@pytest.mark.parametrize(("mutate", "key"), [pytest.param(*case[1:], id=case[0]) for case in BAD_RNG_STATES])
def test_a_bad_rng_state_raises_naming_its_key_and_leaves_every_generator_as_it_was(
    mutate: Callable[[dict[str, Any]], Any], key: str
) -> None:
    bad = mutate(GlobalRng.capture().to_plain())
    _seed_all(6)
    expected = _draws()
    _seed_all(6)
    with pytest.raises(ProgressStateError) as caught:
        GlobalRng.from_plain(bad).apply()
    assert caught.value.key == key
    assert _draws() == expected


def test_an_rng_snapshot_of_version_1_written_by_a_development_build_is_refused() -> None:
    saved = GlobalRng.capture().to_plain()
    assert saved["version"] == 2
    with pytest.raises(ProgressStateError, match="written by a development build") as caught:
        GlobalRng.from_plain({**saved, "version": 1}).apply()
    assert caught.value.key == "version"
