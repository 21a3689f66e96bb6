"""What a position knows of its loader's epochs: the record of what fixed one, and the shared cursor."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader

from tracker_core.data._rng import GlobalRng
from tracker_core.data._samplers import SamplerChain
from tracker_core.data._torch_compat import build_iterator


@dataclass
class EpochRecord:
    """What fixed one epoch's order; fields a kind does not use stay None."""

    iterator_rng: GlobalRng | None = None  # None when a persistent-worker iterator was reused
    loader_generator: torch.Tensor | None = None
    state: Any = None  # "own_state": a loaded loader state, handed to the loader when its epoch is built
    read_again: bool = False  # "own_state": its resume read batches again (a dataset without a state of its own)


@dataclass(frozen=True)
class Replay:
    """An armed resume: the saved epoch's record and the batches of it already consumed."""

    record: EpochRecord
    skip: int


@dataclass(frozen=True)
class FastForward:
    """A resume that read batches again to reach its position: how many, and how long it took."""

    batches: int
    seconds: float


@dataclass
class Cursor:
    """The epoch a position is in, shared by the front and its strategy."""

    epoch: EpochRecord | None = None  # the most recently begun epoch
    replay: Replay | None = None  # armed by load_state_dict
    fast_forward: FastForward | None = None  # the last resume's, when it read batches again
    on_fast_forward: Callable[[float], None] | None = None  # told the seconds of each; not pickled
    indices: Callable[[], object] | None = None  # weakly, the index iterator of the epoch seen last; not pickled

    def __getstate__(self) -> dict[str, Any]:
        """A copy (pickle, deepcopy) tells no one (the callback belongs to the tracker of the original) and cannot
        tell a later epoch from the one seen last."""
        return {**self.__dict__, "on_fast_forward": None, "indices": None}


def _gone() -> None:
    """The reference to a loader collected before its position was pickled."""


class Site:
    """The loader a strategy works on (held weakly) and how to build its iterators."""

    def __init__(self, loader: DataLoader[Any], previous_hook: Any) -> None:
        # The loader holds its position (through its iterator hook); the position holds the
        # loader weakly, so no reference cycle keeps a loader and its workers alive.
        self._loader_ref: Callable[[], DataLoader[Any] | None] = weakref.ref(loader)
        self._previous_hook = previous_hook  # an instance-level _get_iterator someone else set
        self.chain = SamplerChain(loader)
        self.cursor = Cursor()

    def loader_or_none(self) -> DataLoader[Any] | None:
        return self._loader_ref()

    def __getstate__(self) -> dict[str, Any]:
        """Pickled with the loader itself (pickle keeps the cycle), so a pickled loader keeps its position."""
        return {**self.__dict__, "_loader_ref": self._loader_ref()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        loader = state.pop("_loader_ref")
        self.__dict__.update(state, _loader_ref=_gone if loader is None else weakref.ref(loader))

    @property
    def loader(self) -> DataLoader[Any]:
        """The loader; ``RuntimeError`` if nothing else kept it alive."""
        loader = self._loader_ref()
        if loader is None:
            raise RuntimeError("the loader of this LoaderPosition was garbage-collected; keep a reference to it")
        return loader

    def build(self) -> Any:
        """An iterator built as the loader would build it without a position."""
        if self._previous_hook is not None:
            return self._previous_hook()
        return build_iterator(self.loader)
