"""Partial gradients at a checkpoint reach only the writer (rank 0), and cost an 8-byte all_reduce when no
rank is inside an accumulation window (``tracker_core.adapter.gather_to_writer``). Two real gloo processes."""

from __future__ import annotations

import functools
from typing import Any

import torch

from tracker_core.adapter import gather_to_writer

from helpers.collective_spy import collectives_noted
from helpers.gloo import run_on_two_ranks


def _gradients(rank: int) -> list[torch.Tensor | None]:
    return [torch.full((3, 2), float(rank)), None]


def _gather(rank: int) -> dict[str, Any]:
    with collectives_noted() as idle_calls:
        idle = gather_to_writer(None)
    with collectives_noted() as both_calls:
        both = gather_to_writer(_gradients(rank))
    with collectives_noted() as one_calls:
        one = gather_to_writer(_gradients(rank) if rank == 1 else None)
    return {
        "idle": (idle, [name for name, _ in idle_calls]),
        "both": (both, [name for name, _ in both_calls]),
        "one": (one, [name for name, _ in one_calls]),
    }


@functools.cache
def _two_ranks() -> list[dict[str, Any]]:
    return run_on_two_ranks(_gather)


def test_when_no_rank_has_gradients_one_all_reduce_is_all_and_no_rank_gets_any() -> None:
    assert [result["idle"] for result in _two_ranks()] == [(None, ["all_reduce"])] * 2


def test_the_writer_receives_every_ranks_gradients_in_one_gather_and_the_others_nothing() -> None:
    writer, other = _two_ranks()
    ranks, calls = writer["both"]
    assert calls == other["both"][1] == ["all_reduce", "gather"]
    assert other["both"][0] is None
    assert [[None if g is None else g.tolist() for g in found] for found in ranks] == [
        [[[0.0] * 2] * 3, None],
        [[[1.0] * 2] * 3, None],
    ]


def test_a_rank_without_gradients_is_none_in_the_writers_list() -> None:
    ranks, _ = _two_ranks()[0]["one"]
    assert ranks[0] is None
    assert ranks[1][0].tolist() == [[1.0] * 2] * 3


def test_without_a_process_group_the_one_rank_is_the_writer() -> None:
    assert gather_to_writer(None) is None
    assert gather_to_writer([None]) == [[None]]
