"""What a position knows of its loader: the loader itself (held weakly), and the record of what fixed an epoch."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader

from tracker_core.data._rng import GlobalRng
from tracker_core.data._samplers import SamplerChain


@dataclass
class EpochRecord:
    """What fixed one epoch's order (a loader with its own state); a plain loader's, saved inside an epoch, is empty."""

    iterator_rng: GlobalRng | None = None  # None when a persistent-worker iterator was reused
    loader_generator: torch.Tensor | None = None
    state: Any = None  # a loaded loader state, handed to the loader when its epoch is built
    read_again: bool = False  # its resume read batches again (a dataset without a state of its own)
    # The order's generators by path as the epoch's build began and as it left them, and those the loaded loader
    # state set (saved without them).
    began: dict[str, torch.Tensor] | None = None
    built: dict[str, torch.Tensor] | None = None
    fixed: frozenset[str] = frozenset()


@dataclass(frozen=True)
class FastForward:
    """A resume that read batches again to reach its position: how many, and how long it took."""

    batches: int
    seconds: float


def _gone() -> None:
    """The reference to a loader collected before its position was pickled."""


class Site:
    """The loader a position works on, held weakly, and its sampler chain."""

    def __init__(self, loader: DataLoader[Any]) -> None:
        # The loader holds its position (through its iterator hook, or _PLAIN's weak key); the position holds the
        # loader weakly, so no reference cycle keeps a loader and its workers alive.
        self._loader_ref: Callable[[], DataLoader[Any] | None] = weakref.ref(loader)
        self.chain = SamplerChain(loader)

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
