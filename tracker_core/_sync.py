"""Across ranks: reduce the whole state in one collective, and name ranks that disagree.

Works unchanged without a process group (a world of one). Ranks must track the same
number of dataloaders and optimizers, so their packed states have the same length.
Never called per batch: each call is one collective.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import torch
import torch.distributed as dist

from tracker_core._progress import Progress

_OPS = {"sum": dist.ReduceOp.SUM, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}
_NOT_COUNTS = ("schema_version", "where", "kind")


def _leaves(state: object, path: str, out: list[tuple[str, int]]) -> None:
    if isinstance(state, dict):
        for key, value in state.items():
            if key not in _NOT_COUNTS:
                _leaves(value, f"{path}.{key}" if path else key, out)
    elif isinstance(state, list):
        for index, value in enumerate(state):
            _leaves(value, f"{path}.{index}", out)
    elif isinstance(state, int):
        out.append((path, state))


def _replaced(state: object, values: Iterator[int]) -> Any:
    if isinstance(state, dict):
        return {k: v if k in _NOT_COUNTS else _replaced(v, values) for k, v in state.items()}
    if isinstance(state, list):
        return [_replaced(v, values) for v in state]
    if isinstance(state, int):
        return next(values)
    return state


def _pack(progress: Progress) -> tuple[dict[str, Any], list[str], torch.Tensor]:
    state = progress.state_dict()
    leaves: list[tuple[str, int]] = []
    _leaves(state, "", leaves)
    return state, [p for p, _ in leaves], torch.tensor([v for _, v in leaves], dtype=torch.int64)


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def reduce_state(progress: Progress, op: str = "sum") -> dict[str, Any]:
    """Every count of ``progress`` reduced over all ranks (``sum``, ``min`` or ``max``), in state_dict layout.

    With ``sum``, ``stages.train.samples.run`` is the samples of this run over all ranks.
    The result is a report, not a state to load: ``where`` and ``run.kind`` are this rank's.
    """
    if op not in _OPS:
        raise ValueError(f"unknown reduce op {op!r}; expected sum, min or max")
    state, _, packed = _pack(progress)
    if _distributed():
        dist.all_reduce(packed, op=_OPS[op])
    return dict(_replaced(state, iter(packed.tolist())))


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
    _, paths, packed = _pack(progress)
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
