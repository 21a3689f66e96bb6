"""Map-style torch ``DataLoader``: an epoch resumes at its index sampler, so skipped samples are never loaded.

Noted when the index sampler starts: torch's RNG and the samplers' ``generator`` and ``epoch``. A replay re-applies
them and drops the first ``k`` batches of *indices*, before any is sent to a worker.
"""

from __future__ import annotations

import collections
import itertools
import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    DistributedSampler,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

from tracker_core.data._epoch import EpochRecord, Replay, SamplerRng
from tracker_core.data._rng import preserved_global_rng, read_generator_state
from tracker_core.data._strategy import Strategy
from tracker_core.data._torch_compat import random_sampler_after, sampler_indices, set_sampler_indices
from tracker_core.state._codec import tensor_to_text
from tracker_core.state._readers import join_key, read_int, read_mapping

_END = object()
# torch's own samplers (exact types): they draw from torch's RNG and their own generators alone.
_TORCH_SAMPLERS = (
    BatchSampler,
    DistributedSampler,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)


class SamplerReplay(Strategy):
    """Notes and replays what an epoch's index sampler draws from; skips at the sampler."""

    kind = "sampler_replay"
    epoch_keys = ("iterator_rng", "loader_generator", "sampler_rng")
    order_depends_on_workers = False  # indices are drawn in the main process

    def replay(self, replay: Replay) -> Any:
        # Stays armed: the index sampler replays and skips when it starts (a replay draws nothing in the end).
        return self.begin()

    def replays_torch_rng_only(self) -> bool:
        """When every sampler is one of torch's own, which draw from neither (a NumPy replay costs about 0.1 ms)."""
        return all(type(sampler) in _TORCH_SAMPLERS for sampler in self.site.chain.samplers().values())

    def has_drawn(self, record: EpochRecord | None) -> bool:
        return record is not None and record.sampler_rng is not None

    def begin(self) -> Any:
        self.site.cursor.awaiting_sampler = True
        loader = self.site.loader
        name = "batch_sampler" if loader.batch_sampler is not None else "sampler"
        inner = getattr(loader, name)
        # DataLoader.__setattr__ refuses these names after init; the tap is visible only
        # while the iterator is built, and the iterator keeps it as its index sampler.
        object.__setattr__(loader, name, _SamplerTap(inner, self))
        try:
            iterator = self.site.build()
        finally:
            object.__setattr__(loader, name, inner)
        indices = sampler_indices(iterator)
        if type(indices) is _EpochIndices:
            indices.owner = weakref.ref(iterator)
        return iterator

    def start_sampler(self, inner: Iterable[Any]) -> Iterator[Any]:
        """An epoch's index sampler starts: replay its noted RNG and skip, or note it."""
        cursor = self.site.cursor
        started = torch.get_rng_state()
        replay, cursor.replay = cursor.replay, None
        if replay is not None:
            cursor.epoch = replay.record
        elif not cursor.awaiting_sampler or cursor.epoch is None:
            cursor.epoch = EpochRecord()  # a reused persistent-worker iterator began an epoch
        cursor.awaiting_sampler = False
        if replay is not None and replay.record.sampler_rng is not None:
            with preserved_global_rng(torch_only=self.replays_torch_rng_only()):
                self._apply_sampler_rng(replay.record.sampler_rng)
                indices = _skipped(inner, replay.skip)
                # Samplers draw lazily (RandomSampler seeds itself on its first next), so
                # take the first kept batch here, inside the replayed RNG state.
                first = next(indices, _END)
            return iter(()) if first is _END else itertools.chain((first,), indices)
        chain = self.site.chain
        cursor.epoch.sampler_rng = SamplerRng(
            started,
            {path: g.get_state() for path, g in chain.generators(self.site.loader.generator).items()},
            {path: owner.epoch for path, owner in chain.epoch_owners().items()},
        )
        return iter(inner)

    def _apply_sampler_rng(self, rng: SamplerRng) -> None:
        torch.set_rng_state(rng.torch_state)
        generators = self.site.chain.generators(self.site.loader.generator)
        for path, saved in rng.generators.items():
            generators[path].set_state(saved)
        owners = self.site.chain.epoch_owners()
        for path, epoch in rng.epochs.items():
            owners[path].epoch = epoch

    # --- saved form ----------------------------------------------------------------------

    def epoch_to_plain(self, record: EpochRecord) -> dict[str, Any]:
        rng = record.sampler_rng
        if rng is None:
            return {"sampler_rng": None}
        return {
            "sampler_rng": {
                "torch": tensor_to_text(rng.torch_state),
                "generators": {path: tensor_to_text(s) for path, s in rng.generators.items()},
                "epochs": dict(rng.epochs),
            }
        }

    def read_epoch(self, fields: Mapping[str, Any], key: str, record: EpochRecord) -> None:
        if fields["sampler_rng"] is None:
            return
        key = join_key(key, "sampler_rng")
        rng = read_mapping(fields["sampler_rng"], key, required=("torch", "generators", "epochs"))
        torch_state = read_generator_state(rng["torch"], join_key(key, "torch"))
        chain = self.site.chain
        saved = chain.read_generator_states(rng["generators"], join_key(key, "generators"), self.site.loader.generator)
        owners = chain.epoch_owners()
        epochs_key = join_key(key, "epochs")
        saved_epochs = read_mapping(rng["epochs"], epochs_key, required=tuple(owners))
        epochs = {path: read_int(saved_epochs[path], join_key(epochs_key, path), minimum=0) for path in owners}
        record.sampler_rng = SamplerRng(torch_state, {path: state for path, (_, state) in saved.items()}, epochs)


def _skipped(inner: Iterable[Any], skip: int) -> Iterator[Any]:
    """``inner``'s batches after its first ``skip``. A torch ``BatchSampler`` (its exact type) skips its sampler's
    indices instead, building no batch to drop; over torch's ``RandomSampler`` the permutation is sliced before it
    becomes Python ints, so the skip costs the same at any position."""
    if type(inner) is not BatchSampler:
        indices = iter(inner)
        collections.deque(itertools.islice(indices, skip), maxlen=0)
        return indices
    started = random_sampler_after(inner.sampler, skip * inner.batch_size)  # a permutation sliced in one step
    if started is None:
        started = iter(inner.sampler)
        collections.deque(itertools.islice(started, skip * inner.batch_size), maxlen=0)
    return iter(BatchSampler(started, inner.batch_size, inner.drop_last))


class _SamplerTap:
    """The index sampler an iterator sees: ``iter()`` gives one epoch's noted indices."""

    __slots__ = ("_inner", "_strategy")

    def __init__(self, inner: Iterable[Any], strategy: SamplerReplay) -> None:
        self._inner = inner
        self._strategy = strategy

    def __iter__(self) -> _EpochIndices:
        return _EpochIndices(self._inner, self._strategy)

    def __len__(self) -> int:
        return len(self._inner)  # type: ignore[arg-type]


class _EpochIndices:
    """One epoch's indices; the first ``next`` lets the strategy note or replay the start. ``owner``, the
    DataLoader iterator asking (held weakly), is then handed the sampler's own indices: later batches cost
    nothing here."""

    __slots__ = ("_indices", "_inner", "_strategy", "owner")

    def __init__(self, inner: Iterable[Any], strategy: SamplerReplay) -> None:
        self._inner = inner
        self._strategy = strategy
        self._indices: Iterator[Any] | None = None
        self.owner: weakref.ref[Any] | None = None

    def __iter__(self) -> _EpochIndices:
        return self

    def __next__(self) -> Any:
        indices = self._indices
        if indices is None:
            indices = self._indices = self._strategy.start_sampler(self._inner)
            owner = None if self.owner is None else self.owner()
            if owner is not None and sampler_indices(owner) is self:
                set_sampler_indices(owner, indices)
        return next(indices)
