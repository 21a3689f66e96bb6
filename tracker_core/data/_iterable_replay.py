"""Torch ``DataLoader`` over an ``IterableDataset``: the consumed batches are read again (``SlowResumeWarning``)."""

from __future__ import annotations

from typing import Any

from tracker_core.data._epoch import Replay
from tracker_core.data._fast_forward import drop_batches, reading_again
from tracker_core.data._strategy import Strategy, is_stateful


class IterableReplay(Strategy):
    """Rebuilds the epoch under its noted seeds (the workers' too), then reads and drops the consumed batches."""

    kind = "iterable_replay"

    def replay(self, replay: Replay) -> Any:
        self.site.cursor.replay = None
        loader = self.site.loader
        iterator = self.site.build()
        if is_stateful(loader.dataset):
            why = "a plain DataLoader does not put a dataset back by its own state (torchdata's StatefulDataLoader can)"
        else:
            why = "the dataset has no state of its own (state_dict / load_state_dict)"
        with reading_again(self.site.cursor, loader, replay.skip, why):
            drop_batches(iterator, replay.skip)
        return iterator
