"""reduce_state and check_divergence across 2 real gloo processes, and without a process group."""

from __future__ import annotations

from typing import Any

import pytest
from gloo import run_on_two_ranks

from tracker_core import Divergence, Progress, check_divergence, reduce_state


def _trained(batches: int, samples_per_batch: int) -> Progress:
    progress = Progress()
    progress.run_ready("fit")
    progress.run_started()
    train = progress.train
    train.epoch_ready()
    train.epoch_started()
    for _ in range(batches):
        train.batch_ready()
        train.batch_started()
        train.optimizer_step()
        train.batch_processed(samples_per_batch)
        train.batch_completed()
    return progress


def _reduce_on_rank(rank: int) -> dict[str, Any]:
    progress = _trained(batches=3, samples_per_batch=4 + rank)
    return {op: reduce_state(progress, op)["stages"]["train"]["samples"] for op in ("sum", "min", "max")}


def _divergence_on_rank(rank: int) -> list[tuple[str, tuple[int, ...]]]:
    progress = _trained(batches=3 + rank, samples_per_batch=4)
    return [tuple(d) for d in check_divergence(progress)]


def test_reduce_state_sums_mins_and_maxes_every_count_over_two_gloo_ranks() -> None:
    rank0, rank1 = run_on_two_ranks(_reduce_on_rank)
    assert rank0 == rank1
    assert rank0["sum"] == {"epoch": 27, "run": 27, "lifetime": 27}
    assert rank0["min"] == {"epoch": 12, "run": 12, "lifetime": 12}
    assert rank0["max"] == {"epoch": 15, "run": 15, "lifetime": 15}


def test_check_divergence_names_the_counts_and_ranks_that_disagree() -> None:
    rank0, rank1 = run_on_two_ranks(_divergence_on_rank)
    assert rank0 == rank1
    assert ("stages.train.batches.run.processed", (3, 4)) in rank0
    assert ("stages.train.batches.epoch.processed", (3, 4)) in rank0
    assert all(key.startswith("stages.train") for key, _ in rank0)


def test_divergence_message_lists_each_rank_and_its_value() -> None:
    message = str(Divergence("stages.train.batches.run.processed", (3, 4)))
    assert message == "stages.train.batches.run.processed differs across ranks: rank 0 = 3, rank 1 = 4"


def test_reduce_state_without_a_process_group_is_the_local_state() -> None:
    progress = _trained(batches=2, samples_per_batch=5)
    assert reduce_state(progress) == progress.state_dict()


def test_check_divergence_without_a_process_group_finds_nothing() -> None:
    assert check_divergence(_trained(batches=2, samples_per_batch=5)) == []


def test_check_divergence_rejects_a_key_that_is_not_a_count() -> None:
    with pytest.raises(KeyError, match="stages.train.nothing"):
        check_divergence(Progress(), keys=["stages.train.nothing"])


def test_reduce_state_rejects_an_unknown_op() -> None:
    with pytest.raises(ValueError, match="unknown reduce op 'mean'"):
        reduce_state(Progress(), "mean")
