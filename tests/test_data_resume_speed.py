"""A loader with its own state resumes without reading the batches already trained, wherever it can; a plain
DataLoader reads nothing again either: its resumed epoch starts over (warned).

Each test trains part of an epoch with two batches prefetched ahead of the step (as a framework
does; none for a loader with its own state, which is saved as it is: Ignite's loop, a plain one), saves
``state_dict(batches_consumed=k)``, and resumes a fresh loader. Datasets count
their loads (``__getitem__``) or reads (iteration) in shared memory, so loads in worker
processes count too. Where batches must be read again (a StatefulDataLoader over a dataset without a state of its
own) the resume says so before (``SlowResumeWarning``, naming the loader and the count) and records how long it took.
"""

from __future__ import annotations

import json
import multiprocessing
import warnings
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("torchdata")

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import InexactResumeWarning, ProgressStateError
from tracker_core.data._fast_forward import SlowResumeWarning
from tracker_core.data._position import LoaderPosition
from tracker_core.data._saved_loader import check_saved_loader

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")

SIZE = 24
BATCH = 2  # 12 batches an epoch
CONSUMED = 5
AHEAD = 2  # batches the "framework" fetched beyond the consumed ones at the checkpoint
_FORK = multiprocessing.get_context("fork")


class _Counted(Dataset[int]):
    """Map-style: sample ``i`` is ``i``; ``loads`` counts ``__getitem__`` calls in every process."""

    def __init__(self) -> None:
        self.loads = _FORK.Value("i", 0)

    def __len__(self) -> int:
        return SIZE

    def __getitem__(self, index: int) -> int:
        with self.loads.get_lock():
            self.loads.value += 1
        return index


class _Positioned(IterableDataset[int]):
    """Iterable: each worker reads its share of ``0..SIZE-1``; its position is its own state
    (``state_dict`` / ``load_state_dict``, torchdata's protocol). ``loads`` counts reads."""

    def __init__(self) -> None:
        self.loads = _FORK.Value("i", 0)
        self.position = 0

    def __iter__(self) -> _Positioned:
        self.position = 0
        return self

    def __next__(self) -> int:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        index = worker + self.position * workers
        if index >= SIZE:
            raise StopIteration
        self.position += 1
        with self.loads.get_lock():
            self.loads.value += 1
        return index

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = state["position"]


class _Stateless(_Positioned):
    """The same reads, with no state of its own."""

    state_dict = None  # type: ignore[assignment]
    load_state_dict = None  # type: ignore[assignment]


def _workers(count: int) -> dict[str, Any]:
    return {"num_workers": count, "multiprocessing_context": "fork"} if count else {}


LOADERS: dict[str, Callable[[], DataLoader[Any]]] = {
    "stateful-map-0-workers": lambda: StatefulDataLoader(_Counted(), batch_size=BATCH, shuffle=True),
    "stateful-map-2-workers": lambda: StatefulDataLoader(_Counted(), batch_size=BATCH, shuffle=True, **_workers(2)),
    "stateful-own-state-iterable-0-workers": lambda: StatefulDataLoader(_Positioned(), batch_size=BATCH),
    "stateful-own-state-iterable-2-workers": lambda: StatefulDataLoader(_Positioned(), batch_size=BATCH, **_workers(2)),
}


def _plain_own_state_iterable(workers: int = 0) -> DataLoader[Any]:
    return DataLoader(_Positioned(), batch_size=BATCH, **_workers(workers))


def _ids(batch: Any) -> list[int]:
    return torch.as_tensor(batch).tolist()


def _checkpoint(build: Callable[[], DataLoader[Any]]) -> tuple[dict[str, Any], list[list[int]]]:
    """A saved position after ``CONSUMED`` batches (``AHEAD`` more fetched), and the epoch's batches after it."""
    torch.manual_seed(0)
    loader = build()
    position = LoaderPosition(loader)
    batches = iter(loader)
    fetched = [_ids(next(batches)) for _ in range(CONSUMED + (0 if position.kind == "own_state" else AHEAD))]
    state = json.loads(json.dumps(position.state_dict(batches_consumed=CONSUMED)))
    rest = fetched[CONSUMED:] + [_ids(batch) for batch in batches]
    return state, rest


class _Resumed:
    """A fresh loader resumed from a state: its position, the rest of the epoch it yielded, the loads it made."""

    def __init__(self, build: Callable[[], DataLoader[Any]], state: dict[str, Any]) -> None:
        torch.manual_seed(1)
        self.loader = build()  # a position holds its loader weakly
        self.position = LoaderPosition(self.loader)
        self.position.load_state_dict(state)
        self.rest = [_ids(batch) for batch in self.loader]
        self.loads = self.loader.dataset.loads.value  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", list(LOADERS))
def test_a_resume_loads_only_the_samples_not_yet_trained_and_reads_nothing_again(name: str) -> None:
    state, expected = _checkpoint(LOADERS[name])
    with warnings.catch_warnings():
        warnings.simplefilter("error", SlowResumeWarning)
        resumed = _Resumed(LOADERS[name], state)
    assert resumed.rest == expected
    assert resumed.loads == sum(len(batch) for batch in expected)
    assert resumed.position.fast_forward is None


def _expect_reading_again(build: Callable[[], DataLoader[Any]], match: str, batches: int) -> _Resumed:
    state, expected = _checkpoint(build)
    with pytest.warns(SlowResumeWarning, match=match):
        resumed = _Resumed(build, state)
    assert resumed.rest == expected
    assert resumed.position.fast_forward is not None
    assert resumed.position.fast_forward.batches == batches
    assert resumed.position.fast_forward.seconds >= 0
    return resumed


@pytest.mark.parametrize("workers", [0, 2])
def test_a_stateful_dataloader_over_an_iterable_without_state_warns_that_it_reads_again_and_records_the_time(
    workers: int,
) -> None:
    build = lambda: StatefulDataLoader(_Stateless(), batch_size=BATCH, **_workers(workers))  # noqa: E731
    resumed = _expect_reading_again(
        build, rf"StatefulDataLoader over _Stateless \({workers} workers?\): reading again the 5 batches", CONSUMED
    )
    fast_forward = resumed.position.fast_forward
    assert fast_forward is not None
    assert resumed.position.state_dict(batches_consumed=SIZE // BATCH)["fast_forward"] == {
        "batches": fast_forward.batches,
        "seconds": fast_forward.seconds,
    }


@pytest.mark.parametrize("dataset", [_Positioned, _Stateless])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_plain_dataloader_resumed_mid_epoch_reads_nothing_again_it_warns_and_its_epoch_starts_over(
    workers: int, dataset: type[_Positioned]
) -> None:
    # a plain DataLoader does not use its dataset's own state: torchdata's StatefulDataLoader does
    build = lambda: DataLoader(dataset(), batch_size=BATCH, **_workers(workers))  # noqa: E731
    with pytest.warns(InexactResumeWarning, match="^saving DataLoader .*StatefulDataLoader"):
        state, _ = _checkpoint(build)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SlowResumeWarning)
        with pytest.warns(InexactResumeWarning, match=rf"^resuming DataLoader over {dataset.__name__} \({workers} wo"):
            resumed = _Resumed(build, state)
    assert len(resumed.rest) == SIZE // BATCH  # the whole epoch, read once
    assert resumed.loads == SIZE
    assert resumed.position.fast_forward is None


def test_a_resume_that_reads_nothing_again_saves_no_fast_forward() -> None:
    state, _ = _checkpoint(LOADERS["stateful-map-0-workers"])
    resumed = _Resumed(LOADERS["stateful-map-0-workers"], state)
    assert "fast_forward" not in resumed.position.state_dict(batches_consumed=SIZE // BATCH)


@pytest.mark.parametrize("name", ["stateful-map-0-workers", "stateful-own-state-iterable-0-workers"])
def test_a_loaded_state_forgotten_before_the_epoch_lets_the_loader_read_a_whole_epoch(name: str) -> None:
    build = LOADERS[name]
    state, _ = _checkpoint(build)
    loader = build()
    position = LoaderPosition(loader)
    position.load_state_dict(state)
    position.forget_replay()
    assert len(list(loader)) == SIZE // BATCH


def test_a_state_saved_with_the_datasets_own_state_by_a_development_build_is_refused() -> None:
    """Development builds saved ``epoch.source_state`` for a plain DataLoader at 0 workers; 0.1.0 refuses it."""
    with pytest.warns(InexactResumeWarning):  # a plain loader saved mid-epoch
        state, _ = _checkpoint(_plain_own_state_iterable)
    state["epoch"]["source_state"] = {"batch": CONSUMED, "dataset": {"position": CONSUMED}, "iterator": None}
    with pytest.raises(ProgressStateError, match="unknown key") as error:
        check_saved_loader(state)
    assert error.value.key == "epoch.source_state"
