"""torchdata ``StatefulDataLoader``: an epoch resumes through the loader's own state at the consumed batch.

The loader's ``state_dict()`` is noted when an epoch's iterator is built and after each of
the most recent batches (frameworks prefetch: the loader is ahead of the consumed batches);
a checkpoint saves the state at the batch it consumed. A resume loads it back, so the loader
positions itself: at its sampler for map-style data (nothing is read), through the dataset's
own state for an iterable that has one, its workers with their dataset states and seeds. It
reads batches again only where torchdata must (an iterable without a state of its own; the
steps since the last worker snapshot with ``snapshot_every_n_steps`` > 1), and when the
consumed batch's state was not noted: :class:`SlowResumeWarning` before, the time in
``fast_forward``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch.utils.data import IterableDataset

from tracker_core._errors import ProgressStateError
from tracker_core.data._epoch import KEPT_STATES, EpochRecord, Replay
from tracker_core.data._fast_forward import drop_batches, reading_again
from tracker_core.data._strategy import Strategy
from tracker_core.data._torch_compat import (
    drop_pending_state,
    forget_live_iterator,
    note_each_batch,
    redraw_base_seed,
    skip_sampler,
    start_sampler_now,
    state_reader,
    stateful_reads_again,
    stateful_yielded,
    within_its_epoch,
    without_sampler_skip,
)
from tracker_core.state._codec import from_plain, to_plain
from tracker_core.state._readers import INT64_MIN, UINT64_MAX, is_mapping, join_key


class StatefulLoader(Strategy):
    """Saves the loader's own state at the consumed batch and loads it back."""

    kind = "stateful_dataloader"
    epoch_keys = ("iterator_rng", "loader_generator", "loader_state")
    _sampler_skip = 0  # indices the armed state's sampler had drawn, left to skip_sampler (not torchdata)
    _reads_of: Any = None  # the loader state whose stateful_reads_again is _reads
    _reads = (0, 0)

    def begin(self, record: EpochRecord) -> Any:
        iterator = self.site.build()
        record.state = iterator.state_dict()
        self._note_states(iterator, record, 0)
        return iterator

    def replay(self, replay: Replay) -> Any:
        cursor = self.site.cursor
        cursor.replay = None
        record = replay.record
        to_position, since_snapshot = self._reads_again(record.state)
        by_us = replay.skip - record.state_batch
        batches = to_position + since_snapshot + by_us
        if batches:
            reasons = []
            if to_position:
                reasons.append("its dataset has no state of its own (state_dict / load_state_dict)")
            if since_snapshot:
                reasons.append(f"its workers' last snapshot is {since_snapshot} batches older (snapshot_every_n_steps)")
            if by_us:
                reasons.append(f"the loader's state is kept only for the last {KEPT_STATES} batches it yielded")
            with reading_again(cursor, self.site.loader, batches, " and ".join(reasons)):
                iterator = self._build(by_us)
        else:  # the common case: the loader's own state puts it at the position
            cursor.fast_forward = None
            iterator = self._build(0)
        if by_us:
            record.state, record.state_batch = iterator.state_dict(), replay.skip
        self._note_states(iterator, record, replay.skip)
        return iterator

    def _build(self, drop: int) -> Any:
        """The armed epoch's iterator (it loads the state armed by ``load_state_dict``), ``drop`` batches read."""
        loader = self.site.loader
        iterator = self.site.build()
        if loader.generator is not None:
            redraw_base_seed(iterator, loader.generator)  # torchdata's load undid it (shuffle=True, generator=g)
        if self._sampler_skip:
            skip_sampler(iterator, self._sampler_skip)
            self._sampler_skip = 0
        if not loader.num_workers:
            start_sampler_now(iterator)  # inside the epoch's replayed RNGs, as in the saved run
        if drop:
            drop_batches(iterator, drop)
        return iterator

    def replays_all_global_rngs(self, replay: Replay) -> bool:
        """An iterable put back by its own state (and its workers' by theirs), reading nothing again, is not
        rebuilt from the epoch's global RNGs (the documented contract of an iterable with a state): torch's
        alone, for the base seed, skipping three reads and writes of NumPy's state."""
        if not isinstance(self.site.loader.dataset, IterableDataset):
            return True
        to_position, since_snapshot = self._reads_again(replay.record.state)
        return bool(to_position or since_snapshot or replay.skip != replay.record.state_batch)

    def _reads_again(self, state: Any) -> tuple[int, int]:
        """:func:`stateful_reads_again` of the loader state ``state``, worked out once per state (a resume asks twice)."""
        if self._reads_of is not state:
            iterable = isinstance(self.site.loader.dataset, IterableDataset)
            self._reads_of, self._reads = state, stateful_reads_again(state, iterable)
        return self._reads

    def _note_states(self, iterator: Any, record: EpochRecord, batch: int) -> None:
        """Note the loader's state after each batch past ``batch`` (``record.state`` is the one at ``batch``);
        a reused persistent-worker iterator begins a new epoch record when it resets."""
        record.later.clear()
        current: list[Any] = [record, batch]
        read_state = state_reader(iterator)

        def note(live: Any) -> None:
            current[1] += 1
            current[0].note(current[1], read_state(live))

        def reset(live: Any) -> None:
            epoch = EpochRecord(state=live.state_dict())
            self.site.cursor.epoch = epoch
            current[:] = [epoch, 0]

        loader = self.site.loader
        note_each_batch(iterator, note, reset if loader.persistent_workers and loader.num_workers else None)

    def arm(self, loader_state: Any) -> None:
        self._sampler_skip = 0
        if loader_state is None:
            forget_live_iterator(self.site.loader)
            return
        state, self._sampler_skip = without_sampler_skip(self.site.loader, within_its_epoch(loader_state))
        self.site.loader.load_state_dict(state)  # type: ignore[attr-defined]

    def disarm(self) -> None:
        super().disarm()
        self._sampler_skip = 0
        drop_pending_state(self.site.loader)

    # --- saved form ----------------------------------------------------------------------

    def epoch_to_plain(self, record: EpochRecord, batches_consumed: int) -> dict[str, Any]:
        return {"loader_state": to_plain(record.state_at(batches_consumed)[1], "loader_state")}

    def read_epoch(self, fields: Mapping[str, Any], key: str, record: EpochRecord, skip: int) -> Any:
        state_key = join_key(key, "loader_state")
        loader_state = fields["loader_state"]
        if not is_mapping(loader_state):
            raise ProgressStateError(state_key, f"expected a mapping, got {type(loader_state).__name__}")
        record.state = _untagged_copy(loader_state, 1, [_UNTAGGED_VALUES])
        if record.state is None:
            record.state = from_plain(dict(loader_state), state_key)
        try:
            batch = stateful_yielded(record.state)
        except (KeyError, TypeError, ValueError):
            raise ProgressStateError(state_key, "not a StatefulDataLoader state: no count of yielded batches") from None
        if not 0 <= batch <= skip:
            raise ProgressStateError(state_key, f"saved after {batch} batches, not within the {skip} consumed")
        record.state_batch = batch
        return record.state


_UNTAGGED_DEPTH = 8  # far below from_plain's bounds (tracker_core/state/_codec.py), so what passes passes there
_UNTAGGED_VALUES = 10_000
_UNTAGGED_TYPES = frozenset((type(None), bool, float, str, int, dict))
_STR = frozenset((str,))
_TAGS = frozenset(("__tensor__", "__tuple__"))  # a dict of one of these keys is a tagged tensor or tuple


def _untagged_copy(value: object, depth: int, budget: list[int]) -> dict[str, Any] | None:
    """``from_plain(value)`` for what a ``StatefulDataLoader``'s state mostly is: dicts with ``str`` keys (none a
    tagged tensor or tuple) of None, bools, floats, strs and 64-bit ints, at most ``_UNTAGGED_DEPTH`` deep and
    ``_UNTAGGED_VALUES`` in all; None for anything else, which from_plain reads. The types are checked a dict
    at a time: half of from_plain's Python work (a resume reads one such state)."""
    if type(value) is not dict or (len(value) == 1 and not _TAGS.isdisjoint(value)):
        return None
    budget[0] -= len(value)
    if budget[0] < 0 or not _UNTAGGED_TYPES.issuperset(map(type, value.values())):
        return None
    if not _STR.issuperset(map(type, value)):
        return None
    out = dict(value)
    for name, item in value.items():
        kind = type(item)
        if kind is int:
            if not INT64_MIN <= item <= UINT64_MAX:
                return None
        elif kind is dict:
            if depth == _UNTAGGED_DEPTH:
                return None
            copied = _untagged_copy(item, depth + 1, budget)
            if copied is None:
                return None
            out[name] = copied
    return out
