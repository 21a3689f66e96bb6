"""Every private torch / torchdata attribute data position touches still exists on the installed versions."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("torchdata")

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, RandomSampler
from torch.utils.data.dataloader import _BaseDataLoaderIter
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core.data import _torch_compat
from tracker_core.data._torch_compat import ATTRIBUTES, check_attributes, state_reader, torchdata_attributes
from tracker_core.state._codec import to_plain

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")


def _cases() -> list[tuple[Any, str]]:
    owners = {**ATTRIBUTES, **torchdata_attributes()}
    return [(owner, name) for owner, names in owners.items() for name in names]


@pytest.mark.parametrize(
    ("owner", "name"), [pytest.param(*case, id=f"{case[0].__name__}.{case[1]}") for case in _cases()]
)
def test_each_private_attribute_touched_exists(owner: Any, name: str) -> None:
    check_attributes("installed", "now", {owner: (name,)})


def test_a_missing_attribute_fails_at_import_naming_the_package_version() -> None:
    with pytest.raises(
        ImportError, match=rf"DataLoader\._gone, which torch {re.escape(torch.__version__)} does not have"
    ):
        check_attributes("torch", torch.__version__, {torch.utils.data.DataLoader: ("_gone",)})


def test_importing_the_compat_module_checks_the_installed_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(_BaseDataLoaderIter, "_reset")
    with pytest.raises(ImportError, match=rf"_BaseDataLoaderIter\._reset, which torch {re.escape(torch.__version__)}"):
        importlib.reload(_torch_compat)


class _Squares(Dataset[int]):
    """Map-style with a state of its own (how many samples it loaded)."""

    def __init__(self) -> None:
        self.loaded = 0

    def __len__(self) -> int:
        return 11

    def __getitem__(self, index: int) -> int:
        self.loaded += 1
        return index * index

    def state_dict(self) -> dict[str, int]:
        return {"loaded": self.loaded}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.loaded = state["loaded"]


class _Counter(IterableDataset[int]):
    """An iterable that is its own iterator and carries its position."""

    def __init__(self) -> None:
        self.position = 0

    def __iter__(self) -> _Counter:
        self.position = 0
        return self

    def __next__(self) -> int:
        if self.position == 11:
            raise StopIteration
        self.position += 1
        return self.position

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = state["position"]


class _Generated(IterableDataset[int]):
    def __iter__(self) -> Iterator[int]:
        return iter(range(11))


SINGLE_PROCESS_LOADERS: dict[str, Callable[[], DataLoader[Any]]] = {
    "torchdata-samplers": lambda: StatefulDataLoader(_Squares(), batch_size=3, shuffle=True),
    "torch-sampler": lambda: StatefulDataLoader(_Squares(), batch_size=3, sampler=RandomSampler(range(11))),
    "unbatched": lambda: StatefulDataLoader(_Squares(), batch_size=None),
    "iterable-with-state": lambda: StatefulDataLoader(_Counter(), batch_size=3),
    "iterable-without-state": lambda: StatefulDataLoader(_Generated(), batch_size=3),
}


@pytest.mark.parametrize("name", list(SINGLE_PROCESS_LOADERS))
def test_the_cheap_state_reader_gives_what_state_dict_gives(name: str) -> None:
    iterator = iter(SINGLE_PROCESS_LOADERS[name]())
    read_state = state_reader(iterator)
    for _ in range(5):
        assert to_plain(read_state(iterator)) == to_plain(iterator.state_dict())  # type: ignore[attr-defined]
        next(iterator, None)
