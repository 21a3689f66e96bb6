"""The samplers a DataLoader reaches, the generators and epochs that fix their order, and its sharding."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, DistributedSampler

from tracker_core._errors import ProgressStateError
from tracker_core.data._rng import read_generator_state
from tracker_core.distributed._sharded import SHARDED_KEYS
from tracker_core.distributed._sharded import describe as describe_batch_sharding
from tracker_core.state._readers import INT64_MAX, UINT64_MAX, join_key, read_bool, read_int, read_mapping, shown

# A DistributedSampler's settings, and the loader's per-rank batch size: what maps a position
# across world sizes (tracker_core/distributed/_elastic.py). A batch-sharded loader adds SHARDED_KEYS.
DISTRIBUTED_KEYS = ("num_replicas", "rank", "seed", "shuffle", "drop_last", "dataset_size", "batch_size")
# The attributes through which samplers hold the samplers they draw from.
_CHAIN = ("sampler", "batch_sampler")


class SamplerChain:
    """The sampler chain of one loader, walked from its ``sampler`` and ``batch_sampler`` (fixed after init)."""

    __slots__ = ("_batch_sampler", "_sampler")

    def __init__(self, loader: DataLoader[Any]) -> None:
        self._sampler = loader.sampler
        self._batch_sampler = loader.batch_sampler

    def samplers(self) -> dict[str, Any]:
        """Every sampler reached through ``.sampler`` / ``.batch_sampler`` at any depth (wrappers such as
        Accelerate's ``BatchSamplerShard`` nest the user's), by path, breadth first: each once, at its shortest path."""
        found: dict[str, Any] = {}
        seen: set[int] = set()
        queue = [("sampler", self._sampler), ("batch_sampler", self._batch_sampler)]
        while queue:
            path, obj = queue.pop(0)
            if obj is None or id(obj) in seen:
                continue
            seen.add(id(obj))
            found[path] = obj
            queue.extend((f"{path}.{name}", getattr(obj, name, None)) for name in _CHAIN)
        return found

    def epoch_set(self) -> bool:
        """Whether a sampler's order depends on the epoch the framework sets (``set_epoch``: a DistributedSampler)."""
        return any(callable(getattr(s, "set_epoch", None)) for s in self.samplers().values())

    def generators(
        self, loader_generator: torch.Generator | None, samplers: dict[str, Any] | None = None
    ) -> dict[str, torch.Generator]:
        """The order-fixing generators by path, each once, e.g. ``{"sampler.generator": g}`` (``samplers``:
        what :meth:`samplers` just gave, if at hand)."""
        found: dict[str, torch.Generator] = {}
        candidates = [("generator", loader_generator)]
        walked = self.samplers() if samplers is None else samplers
        candidates += [(f"{path}.generator", getattr(s, "generator", None)) for path, s in walked.items()]
        for path, generator in candidates:
            if isinstance(generator, torch.Generator) and all(generator is not g for g in found.values()):
                found[path] = generator
        return found

    def read_generator_states(
        self, value: object, key: str, loader_generator: torch.Generator | None, samplers: dict[str, Any]
    ) -> dict[str, tuple[torch.Generator, torch.Tensor]]:
        """Saved states of :meth:`generators`, each checked against its generator: ``{path: (generator, state)}``."""
        mine = self.generators(loader_generator, samplers)
        fields = read_mapping(value, key, required=tuple(mine))
        return {path: (g, read_generator_state(fields[path], join_key(key, path), g)) for path, g in mine.items()}

    def distributed_info(self, batch_size: int | None, samplers: dict[str, Any] | None = None) -> dict[str, Any] | None:
        """The DistributedSampler in the chain (``DISTRIBUTED_KEYS``); without exactly one, the batch sharding
        over a seedable sampler (``distributed/_sharded.py``), or None. ``samplers``: as for :meth:`generators`."""
        samplers = self.samplers() if samplers is None else samplers
        found = [s for s in samplers.values() if isinstance(s, DistributedSampler)]
        if len(found) != 1:
            return describe_batch_sharding(samplers)
        sampler = found[0]
        return {
            "num_replicas": int(sampler.num_replicas),
            "rank": int(sampler.rank),
            "seed": int(sampler.seed),
            "shuffle": bool(sampler.shuffle),
            "drop_last": bool(sampler.drop_last),
            "dataset_size": len(sampler.dataset),  # type: ignore[arg-type]
            "batch_size": batch_size,
        }


def read_distributed(value: object, key: str) -> dict[str, Any] | None:
    """A saved ``distributed`` field: None or the ``DISTRIBUTED_KEYS`` (and ``SHARDED_KEYS`` of a
    batch-sharded loader) with their types checked."""
    if value is None:
        return None
    fields = read_mapping(value, key, required=DISTRIBUTED_KEYS, optional=SHARDED_KEYS)
    out: dict[str, Any] = {}
    for name in ("num_replicas", "rank", "seed", "dataset_size"):
        out[name] = read_int(
            fields[name], join_key(key, name), minimum=0, maximum=UINT64_MAX if name == "seed" else INT64_MAX
        )
    for name in ("shuffle", "drop_last"):
        out[name] = read_bool(fields[name], join_key(key, name))
    batch_size = fields["batch_size"]
    out["batch_size"] = None if batch_size is None else read_int(batch_size, join_key(key, "batch_size"), minimum=1)
    if any(name in fields for name in SHARDED_KEYS):
        read_mapping(fields, key, required=(*DISTRIBUTED_KEYS, *SHARDED_KEYS))  # both or neither
        if fields["shards"] != "batches":
            raise ProgressStateError(join_key(key, "shards"), f"expected 'batches', got {shown(fields['shards'])}")
        out.update(shards="batches", even_batches=read_bool(fields["even_batches"], join_key(key, "even_batches")))
    return out
