"""Torch ``DataLoader`` over an ``IterableDataset``: an epoch resumes through the dataset's own state, or by reading.

The iterator is rebuilt under the noted global RNGs and loader generator (so workers get the
same seeds). With no worker, a dataset (or its iterator) with its own ``state_dict`` /
``load_state_dict`` (torchdata's protocol) has its state noted after each batch and is put
back to the consumed batch without reading. Otherwise the consumed batches are read and
dropped (with a :class:`SlowResumeWarning` before, the time it took in ``fast_forward``): in
worker processes a plain DataLoader's dataset copies are out of reach; torchdata's
``StatefulDataLoader`` reaches them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tracker_core._errors import ProgressStateError
from tracker_core.data._epoch import KEPT_STATES, EpochRecord, Replay
from tracker_core.data._fast_forward import drop_batches, reading_again
from tracker_core.data._strategy import Strategy, is_stateful
from tracker_core.data._torch_compat import fetched_iterable, note_each_batch
from tracker_core.state._codec import from_plain, to_plain
from tracker_core.state._readers import join_key, read_int, read_mapping

_SOURCE_KEYS = ("batch", "dataset", "iterator")


class IterableReplay(Strategy):
    """Rebuilds the epoch under its noted seeds, then positions the dataset by its own state or by reading."""

    kind = "iterable_replay"
    optional_epoch_keys = ("source_state",)

    def begin(self, record: EpochRecord) -> Any:
        iterator = self.site.build()
        record.state = None if self.site.loader.num_workers else self._own_state(iterator)
        if record.state is not None:
            self._note_states(iterator, record, 0)
        return iterator

    def replay(self, replay: Replay) -> Any:
        self.site.cursor.replay = None
        record = replay.record
        loader = self.site.loader
        own = record.state
        if own is not None and own["dataset"] is not None:
            loader.dataset.load_state_dict(own["dataset"])  # type: ignore[attr-defined]
        iterator = self.site.build()
        if own is not None and own["iterator"] is not None:
            fetched_iterable(iterator).load_state_dict(own["iterator"])
        if loader.num_workers and is_stateful(loader.dataset):
            why = (
                f"a plain DataLoader cannot reach the state of a dataset in {loader.num_workers} worker "
                "processes (torchdata's StatefulDataLoader can)"
            )
        elif own is not None:
            why = f"the dataset's state is kept only for the last {KEPT_STATES} batches the loader yielded"
        else:
            why = "the dataset has no state of its own (state_dict / load_state_dict)"
        by_us = replay.skip - record.state_batch
        with reading_again(self.site.cursor, loader, by_us, why):
            drop_batches(iterator, by_us)
        if by_us and not loader.num_workers:
            record.state, record.state_batch = self._own_state(iterator), replay.skip
        if record.state is not None:
            self._note_states(iterator, record, replay.skip)
        return iterator

    def _note_states(self, iterator: Any, record: EpochRecord, batch: int) -> None:
        """Note the dataset's own state after each batch past ``batch`` (``record.state`` is the one at ``batch``)."""
        record.later.clear()
        count = [batch]

        def note(live: Any) -> None:
            count[0] += 1
            record.note(count[0], self._own_state(live))

        note_each_batch(iterator, note)

    def _own_state(self, iterator: Any) -> dict[str, Any] | None:
        """The dataset's and its iterator's own states, as torchdata's StatefulDataLoader takes them."""
        dataset = self.site.loader.dataset
        source = fetched_iterable(iterator)
        dataset_state = dataset.state_dict() if source is not dataset and is_stateful(dataset) else None  # type: ignore[attr-defined]
        iterator_state = source.state_dict() if is_stateful(source) else None
        if dataset_state is None and iterator_state is None:
            return None
        return {"dataset": dataset_state, "iterator": iterator_state}

    # --- saved form ----------------------------------------------------------------------

    def epoch_to_plain(self, record: EpochRecord, batches_consumed: int) -> dict[str, Any]:
        batch, state = record.state_at(batches_consumed)
        if state is None:
            return {}
        source = {"batch": batch, **state}
        return {"source_state": to_plain(source, "epoch.source_state")}

    def read_epoch(self, fields: Mapping[str, Any], key: str, record: EpochRecord, skip: int) -> Any:
        if "source_state" not in fields:
            return None
        key = join_key(key, "source_state")
        source = read_mapping(fields["source_state"], key, required=_SOURCE_KEYS)
        batch = read_int(source["batch"], join_key(key, "batch"), minimum=0)
        if batch > skip:
            raise ProgressStateError(join_key(key, "batch"), f"{batch} is past the {skip} consumed batches")
        record.state_batch = batch
        record.state = {name: from_plain(source[name], join_key(key, name)) for name in ("dataset", "iterator")}
        return None
