"""Several train DataLoaders in one Ignite epoch, in turn, with per-loader progress and an exact resume."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader


class RoundRobin:
    """Give ``trainer.run()`` batches of several DataLoaders in turn until each ran out (docs/ignite.md);
    ``last_index`` is the loader the latest batch came from."""

    def __init__(self, *loaders: DataLoader[Any]) -> None:
        if not loaders:
            raise ValueError("RoundRobin needs at least one DataLoader")
        self.loaders = loaders
        self.last_index = 0
        self._skip = 0  # turns already taken before a resumed checkpoint

    def __len__(self) -> int:
        return sum(len(loader) for loader in self.loaders)

    def resume_at(self, turns: int) -> None:
        """The next iteration continues an epoch of which ``turns`` batches were taken (the loaders skip theirs)."""
        self._skip = turns

    def __iter__(self) -> Iterator[Any]:
        iterators = [iter(loader) for loader in self.loaders]  # a resumed loader yields its remaining batches
        skip, self._skip = self._skip, 0
        lengths = [len(loader) for loader in self.loaders]
        turns = (index for turn in range(max(lengths)) for index, length in enumerate(lengths) if turn < length)
        for index in itertools.islice(turns, skip, None):
            try:
                batch = next(iterators[index])
            except StopIteration:
                break
            self.last_index = index
            yield batch
        for iterator in iterators:  # end each loader's epoch as a loop over it would
            next(iterator, None)
