"""Batch-sharded train loaders: recognised in a sampler chain, and what one rank reads of an epoch.

Such a loader draws one order per epoch from a *seedable* sampler, whose order depends on
``initial_seed + epoch`` and its length only (Accelerate's ``SeedableRandomSampler``, made
by ``use_seedable_sampler=True``), cuts it into batches of ``b`` with a torch ``BatchSampler``,
and rank ``r`` of ``W`` takes batches ``r, r + W, r + 2W, ...`` (Accelerate's
``BatchSamplerShard`` with ``split_batches=False``; with ``even_batches`` the last round is
filled up from the epoch's start; a world of one has no shard and takes every batch). After
``k`` batches on every rank, positions ``[0, k * b * W)`` of the order are consumed, as with a
DistributedSampler, so ``tracker_core/distributed/_elastic.py`` maps both by global samples.

:func:`describe` gives the ``distributed`` field of such a loader's state: the
DistributedSampler's keys (``num_replicas``, ``rank``, ``seed``, ``shuffle``, ``drop_last``,
``dataset_size``, ``batch_size``) plus ``SHARDED_KEYS``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

from torch.utils.data import BatchSampler, RandomSampler

SHARDED_KEYS = ("shards", "even_batches")  # "shards" is "batches"; a DistributedSampler's field has neither
_SHARD_ATTRIBUTES = ("num_processes", "process_index", "split_batches", "even_batches", "batch_sampler")


def describe(samplers: Mapping[str, Any]) -> dict[str, Any] | None:
    """The batch sharding of a loader whose sampler chain is ``samplers`` (path -> sampler), or None.

    None unless exactly one seedable sampler feeds a torch ``BatchSampler`` that is the
    loader's ``batch_sampler`` or the one a single shard (without ``split_batches``) wraps.
    """
    seedable = [s for s in samplers.values() if _is_seedable(s)]
    shards = [s for s in samplers.values() if all(hasattr(s, name) for name in _SHARD_ATTRIBUTES)]
    if len(seedable) != 1 or len(shards) > 1 or any(shard.split_batches for shard in shards):
        return None
    base = shards[0].batch_sampler if shards else samplers.get("batch_sampler")
    if not isinstance(base, BatchSampler) or base.sampler is not seedable[0]:
        return None
    return {
        "num_replicas": int(shards[0].num_processes) if shards else 1,
        "rank": int(shards[0].process_index) if shards else 0,
        "seed": int(seedable[0].initial_seed),  # type: ignore[attr-defined]
        "shuffle": True,
        "drop_last": bool(base.drop_last),
        "dataset_size": len(seedable[0]),
        "batch_size": int(base.batch_size),
        "shards": "batches",
        "even_batches": bool(shards[0].even_batches) if shards else False,
    }


def is_batch_sharded(info: Mapping[str, Any]) -> bool:
    """Whether a ``distributed`` field describes a batch-sharded loader (else a DistributedSampler)."""
    return info.get("shards") == "batches"


def samples_read(info: Mapping[str, Any], batches: int) -> int:
    """Samples rank ``info["rank"]`` reads in its first ``batches`` batches of an epoch.

    Every batch is full with ``drop_last`` or ``even_batches``; otherwise the epoch's last
    batch holds what is left of the order.
    """
    size, batch, world = info["dataset_size"], info["batch_size"], info["num_replicas"]
    full = info["drop_last"] or info["even_batches"]
    indices = (info["rank"] + i * world for i in range(batches))  # this rank's batches in the epoch's order
    return sum(batch if full else max(0, min(batch, size - j * batch)) for j in indices)


def _is_seedable(sampler: object) -> TypeGuard[RandomSampler]:
    """A RandomSampler over its whole data source, reseeded by ``initial_seed + epoch`` when it starts."""
    return (
        isinstance(sampler, RandomSampler)
        and isinstance(getattr(sampler, "initial_seed", None), int)
        and isinstance(getattr(sampler, "epoch", None), int)
        and not sampler.replacement
        and sampler.num_samples == len(sampler.data_source)
    )
