"""Torch ``DataLoader`` over an ``IterableDataset``: the epoch is rebuilt under its noted seeds (the workers' too)
and the consumed batches read again (:class:`SlowResumeWarning`). torchdata's ``StatefulDataLoader`` (kind
``"own_state"``) puts a dataset with a state of its own back without reading it.
"""

from __future__ import annotations

from typing import Any

from tracker_core.data._epoch import Replay
from tracker_core.data._fast_forward import drop_batches, reading_again
from tracker_core.data._strategy import Strategy, is_stateful


class IterableReplay(Strategy):
    """Rebuilds the epoch under its noted seeds, then reads and drops the consumed batches."""

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
