"""Across ranks: reduce the whole state in one collective, and name ranks that disagree.

Works unchanged without a process group (a world of one). Ranks must track the same
number of dataloaders and optimizers, so their packed states have the same length.
Never called per batch: each call is one collective.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import torch
import torch.distributed as dist

from tracker_core._progress import Progress

_OPS = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}
_NOT_COUNTS = ("schema_version", "where", "kind")


def _counts(state: dict[str, Any], out: list[int]) -> None:
    """Append every count of ``state`` to ``out``, depth first in key order."""
    for key, value in state.items():
        if key in _NOT_COUNTS:
            continue
        if type(value) is int:
            out.append(value)
        elif type(value) is dict:
            _counts(value, out)
        elif type(value) is list:
            for item in value:
                _counts(item, out)


def _paths(state: dict[str, Any], prefix: str, out: list[str]) -> None:
    """Append the key path of every count, in the order of :func:`_counts`."""
    for key, value in state.items():
        if key in _NOT_COUNTS:
            continue
        path = f"{prefix}.{key}" if prefix else key
        if type(value) is int:
            out.append(path)
        elif type(value) is dict:
            _paths(value, path, out)
        elif type(value) is list:
            for index, item in enumerate(value):
                _paths(item, f"{path}.{index}", out)


def _replaced(state: dict[str, Any], values: Iterator[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in state.items():
        if key in _NOT_COUNTS:
            out[key] = value
        elif type(value) is int:
            out[key] = next(values)
        elif type(value) is dict:
            out[key] = _replaced(value, values)
        else:
            out[key] = [_replaced(item, values) for item in value]
    return out


def _pack(progress: Progress) -> tuple[dict[str, Any], torch.Tensor]:
    state = progress.state_dict()
    counts: list[int] = []
    _counts(state, counts)
    return state, torch.frombuffer(array("q", counts), dtype=torch.int64)


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def reduce_state(progress: Progress, op: str = "sum") -> dict[str, Any]:
    """Every count of ``progress`` reduced over all ranks (``sum``, ``min`` or ``max``), in state_dict layout.

    With ``sum``, ``stages.train.samples.run`` is the samples of this run over all ranks.
    The result is a report, not a state to load: ``where`` and ``run.kind`` are this rank's.
    """
    if op not in _OPS:
        raise ValueError(f"unknown reduce op {op!r}; expected sum, min or max")
    state, packed = _pack(progress)
    if _distributed():
        dist.all_reduce(packed, op=_OPS[op])
    return _replaced(state, iter(packed.tolist()))


class Divergence(NamedTuple):
    """One count on which ranks disagree: its key path and its value on each rank."""

    key: str
    values: tuple[int, ...]

    def __str__(self) -> str:
        by_rank = ", ".join(f"rank {rank} = {value}" for rank, value in enumerate(self.values))
        return f"{self.key} differs across ranks: {by_rank}"


DEFAULT_DIVERGENCE_KEYS = tuple(
    f"stages.{stage}.{key}"
    for stage in ("train", "validate", "test", "predict")
    for key in ("epochs.run.completed", "batches.run.processed", "batches.epoch.processed")
)


def check_divergence(progress: Progress, keys: Sequence[str] = DEFAULT_DIVERGENCE_KEYS) -> list[Divergence]:
    """The counts among ``keys`` (state_dict key paths) whose value is not the same on every rank.

    One all_gather. Call it where every rank is sure to arrive (e.g. each epoch's end),
    to learn of uneven data before a rank waits forever in a gradient collective.
    """
    state, packed = _pack(progress)
    paths: list[str] = []
    _paths(state, "", paths)
    unknown = [k for k in keys if k not in paths]
    if unknown:
        raise KeyError(f"no count at {unknown[0]!r} in the progress state")
    if not _distributed():
        return []
    gathered = [torch.empty_like(packed) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, packed)
    index = {path: i for i, path in enumerate(paths)}
    found = []
    for key in keys:
        values = tuple(int(rank_values[index[key]]) for rank_values in gathered)
        if len(set(values)) > 1:
            found.append(Divergence(key, values))
    return found
