"""What a position knows of its loader: the loader itself (held weakly), and the record of what fixed an epoch."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch.utils.data import DataLoader

from tracker_core.data._samplers import SamplerChain


@dataclass
class EpochRecord:
    """The epoch of a loader with its own state, saved or loaded; a plain loader's, saved inside an epoch, is empty."""

    state: Any = None  # a loaded loader state, until the loader's resumed iterator is built
    read_again: bool = False  # its resume read batches again (a dataset without a state of its own)


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
        # The loader is the weak key of its position (_POSITIONS); the position holds the loader weakly, so no
        # reference cycle keeps a loader and its workers alive.
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
