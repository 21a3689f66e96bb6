"""Across ranks, never per batch: reduce the whole state in one collective, name ranks that disagree
(docs/distributed.md)."""

from __future__ import annotations

from collections.abc import Sequence
from struct import Struct
from typing import Any, NamedTuple

import torch
import torch.distributed as dist

from tracker_core.counting._progress import Progress
from tracker_core.counting._view import ProgressView
from tracker_core.distributed._collective import run_collective
from tracker_core.distributed._elastic import world
from tracker_core.state._schema import count_paths, pack, unpack
from tracker_core.vocabulary import Phase, Scope, Stage

_OPS = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}


def _progress_of(source: Progress | ProgressView) -> Progress:
    return source._progress if isinstance(source, ProgressView) else source


def reduce_state(progress: Progress | ProgressView, op: str = "sum") -> dict[str, Any]:
    """Every count of ``progress`` (a Progress or its view) reduced over all ranks by ``op`` (``sum``, ``min`` or
    ``max``) in one ``all_reduce``, in state_dict layout: a report, not a state to load (docs/distributed.md).
    ``where``, ``run.kind`` and ``anomalies`` are this rank's; times reduce by ``op`` too."""
    if op not in _OPS:
        raise ValueError(f"unknown reduce op {op!r}; expected sum, min or max")
    live = _progress_of(progress)
    counts: Sequence[int] = pack(live)
    if world()[0] > 1:
        values, tensor, struct = _buffer(len(counts))
        struct.pack_into(values, 0, *counts)
        run_collective(lambda: dist.all_reduce(tensor, op=_OPS[op]), [tensor])
        counts = struct.unpack_from(values)
    return unpack(live, counts)


_BUFFERS: dict[int, tuple[bytearray, torch.Tensor, Struct]] = {}


def _buffer(length: int) -> tuple[bytearray, torch.Tensor, Struct]:
    """Bytes, an int64 tensor sharing them and the struct packing ``length`` counts, kept per length (gloo
    reduces a tensor it has seen ~10% faster)."""
    buffer = _BUFFERS.get(length)
    if buffer is None:
        values = bytearray(8 * length)
        buffer = _BUFFERS[length] = (values, torch.frombuffer(values, dtype=torch.int64), Struct(f"={length}q"))
    return buffer


class Divergence(NamedTuple):
    """One count on which ranks disagree: its key path and its value on each rank."""

    key: str
    values: tuple[int, ...]

    def __str__(self) -> str:
        by_rank = ", ".join(f"rank {rank} = {value}" for rank, value in enumerate(self.values))
        return f"{self.key} differs across ranks: {by_rank}"


DEFAULT_DIVERGENCE_KEYS = tuple(
    f"stages.{stage}.{key}"
    for stage in Stage
    for key in (
        f"epochs.{Scope.RUN}.{Phase.COMPLETED}",
        f"batches.{Scope.RUN}.{Phase.PROCESSED}",
        f"batches.{Scope.EPOCH}.{Phase.PROCESSED}",
    )
)


def check_divergence(
    progress: Progress | ProgressView, keys: Sequence[str] = DEFAULT_DIVERGENCE_KEYS
) -> list[Divergence]:
    """The counts among ``keys`` (state_dict key paths) whose value differs across ranks; ``progress``: the
    Progress or its view. One all_gather: call it where every rank arrives (docs/distributed.md, "Divergence").
    """
    live = _progress_of(progress)
    paths = count_paths(live)
    unknown = [k for k in keys if k not in paths]
    if unknown:
        raise KeyError(f"no count at {unknown[0]!r} in the progress state")
    if world()[0] == 1:
        return []
    packed = torch.tensor(pack(live), dtype=torch.int64)
    gathered = [torch.empty_like(packed) for _ in range(dist.get_world_size())]
    run_collective(lambda: dist.all_gather(gathered, packed), [packed, *gathered])
    index = {path: i for i, path in enumerate(paths)}
    by_rank = [values.tolist() for values in gathered]
    found = (Divergence(key, tuple(values[index[key]] for values in by_rank)) for key in keys)
    return [divergence for divergence in found if len(set(divergence.values)) > 1]
