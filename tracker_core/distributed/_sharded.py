"""Batch-sharded train loaders (Accelerate's ``BatchSamplerShard`` over a seedable sampler): recognised in a
sampler chain, and what one rank reads of an epoch (docs/distributed.md, "Batch sharding over a seedable sampler").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeGuard

from torch.utils.data import BatchSampler, RandomSampler

SHARDED_KEYS = ("shards", "even_batches")  # "shards" is "batches"; a DistributedSampler's field has neither
_SHARD_ATTRIBUTES = ("num_processes", "process_index", "split_batches", "even_batches", "batch_sampler")


def describe(samplers: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``distributed`` field of a loader whose sampler chain is ``samplers`` (path -> sampler), or None unless
    exactly one seedable sampler feeds a torch ``BatchSampler`` that is the loader's ``batch_sampler`` or the
    one a single shard (without ``split_batches``) wraps."""
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
    """Samples rank ``info["rank"]`` reads in its first ``batches`` batches of an epoch: every batch is full with
    ``drop_last`` or ``even_batches``, else the epoch's last batch holds what is left of the order."""
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
