"""reduce_state and check_divergence across 2 real gloo processes, and without a process group."""

from __future__ import annotations

import functools
from typing import Any

import pytest
from torch.utils.data import DataLoader

from tracker_core import Divergence, Progress, Tracker, check_divergence, reduce_state
from tracker_core.state._schema import count_paths, pack

from helpers.core_drive import whole_batch
from helpers.gloo import run_on_two_ranks


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


def _all_on_rank(rank: int) -> dict[str, Any]:
    """Every two-rank scenario in one process group: spawning the ranks is the slow part."""
    return {
        "reduce": _reduce_on_rank(rank),
        "divergence": _divergence_on_rank(rank),
        "uneven": _uneven_data_on_rank(rank),
        "ahead": _one_rank_an_epoch_ahead(rank),
    }


@functools.cache
def _on_two_ranks(scenario: str) -> list[Any]:
    return [found[scenario] for found in _two_ranks()]


@functools.cache
def _two_ranks() -> list[dict[str, Any]]:
    return run_on_two_ranks(_all_on_rank)


def test_reduce_state_sums_mins_and_maxes_every_count_over_two_gloo_ranks() -> None:
    rank0, rank1 = _on_two_ranks("reduce")
    assert rank0 == rank1
    assert rank0["sum"] == {"epoch": 27, "run": 27, "lifetime": 27}
    assert rank0["min"] == {"epoch": 12, "run": 12, "lifetime": 12}
    assert rank0["max"] == {"epoch": 15, "run": 15, "lifetime": 15}


def test_check_divergence_names_the_counts_and_ranks_that_disagree() -> None:
    rank0, rank1 = _on_two_ranks("divergence")
    assert rank0 == rank1
    assert ("stages.train.batches.run.processed", (3, 4)) in rank0
    assert ("stages.train.batches.epoch.processed", (3, 4)) in rank0
    assert all(key.startswith("stages.train") for key, _ in rank0)


def _uneven_data_on_rank(rank: int) -> list[str]:
    """Each rank trains one epoch of its own shard (10 and 13 samples, batches of 4), then checks at its end."""
    tracker = Tracker()
    loader = DataLoader(list(range(10 + 3 * rank)), batch_size=4)
    tracker.track_train_loader(loader)
    progress = tracker.progress
    progress.run_ready("fit")
    progress.run_started()
    train = progress.train
    train.epoch_ready()
    train.epoch_started()
    for batch in loader:
        train.batch_ready()
        train.batch_started()
        train.batch_processed(len(batch))
        train.batch_completed()
    train.epoch_processed()
    train.epoch_completed()
    return [str(d) for d in check_divergence(tracker.view)]


def _one_rank_an_epoch_ahead(rank: int) -> list[tuple[str, tuple[int, ...]]]:
    progress = _trained(batches=2, samples_per_batch=4)
    progress.train.epoch_processed()
    progress.train.epoch_completed()
    if rank == 1:
        progress.train.epoch_ready()
        progress.train.epoch_started()
        for _ in range(2):
            whole_batch(progress)
        progress.train.epoch_processed()
        progress.train.epoch_completed()
    return [tuple(d) for d in check_divergence(progress)]


def test_uneven_data_is_named_at_the_epoch_end_check_with_each_ranks_batch_count() -> None:
    rank0, rank1 = _on_two_ranks("uneven")
    assert rank0 == rank1
    assert "stages.train.batches.epoch.processed differs across ranks: rank 0 = 3, rank 1 = 4" in rank0
    assert "stages.train.batches.run.processed differs across ranks: rank 0 = 3, rank 1 = 4" in rank0


def test_a_rank_an_epoch_ahead_is_named_with_each_ranks_epoch_count() -> None:
    rank0, rank1 = _on_two_ranks("ahead")
    assert rank0 == rank1
    assert ("stages.train.epochs.run.completed", (1, 2)) in rank0
    assert ("stages.train.batches.run.processed", (2, 4)) in rank0


def test_divergence_message_lists_each_rank_and_its_value() -> None:
    message = str(Divergence("stages.train.batches.run.processed", (3, 4)))
    assert message == "stages.train.batches.run.processed differs across ranks: rank 0 = 3, rank 1 = 4"


def test_reduce_state_without_a_process_group_is_the_local_state() -> None:
    progress = _trained(batches=2, samples_per_batch=5)
    assert reduce_state(progress) == progress.state_dict()


def test_the_counts_packed_from_live_counters_have_the_state_dict_layout_in_every_part() -> None:
    progress = _trained(batches=2, samples_per_batch=5)
    train = progress.train
    train.batch_ready()
    train.batch_started()
    train.optimizer_step(1)
    train.optimizer_step_skipped(0)
    train.scheduler_step()
    train.batch_processed(3, dataloader=1)  # in flight: processed, not completed
    progress.validate.epoch_ready()
    progress.validate.epoch_started()
    assert reduce_state(progress) == progress.state_dict()


def test_a_progress_that_gains_a_dataloader_after_a_reduce_is_reduced_in_its_new_layout() -> None:
    progress = _trained(batches=2, samples_per_batch=5)
    reduce_state(progress)
    train = progress.train
    train.batch_ready()
    train.batch_started()
    train.batch_processed(3, dataloader=2)
    train.batch_completed()
    assert reduce_state(progress) == progress.state_dict()


def _count_paths(node: Any, prefix: str = "") -> list[str]:
    if type(node) is int:
        return [prefix]
    if isinstance(node, str):
        return []
    items = enumerate(node) if isinstance(node, list) else node.items()
    return [
        path
        for key, value in items
        if key not in ("schema_version", "ledger")  # the ledger is each rank's history, not a count
        for path in _count_paths(value, f"{prefix}.{key}" if prefix else str(key))
    ]


def test_check_divergence_accepts_the_key_path_of_every_count_in_the_state() -> None:
    progress = _trained(batches=2, samples_per_batch=5)
    progress.train.optimizer_step(1)
    assert check_divergence(progress, keys=_count_paths(progress.state_dict())) == []


def test_reduce_state_and_check_divergence_take_the_view_the_accessor_returns() -> None:
    progress = _trained(batches=2, samples_per_batch=5)
    assert reduce_state(progress.view, "max") == progress.state_dict()
    assert check_divergence(progress.view) == []


def test_check_divergence_without_a_process_group_finds_nothing() -> None:
    assert check_divergence(_trained(batches=2, samples_per_batch=5)) == []


def test_check_divergence_rejects_a_key_that_is_not_a_count() -> None:
    with pytest.raises(KeyError, match=r"stages\.train\.nothing"):
        check_divergence(Progress(), keys=["stages.train.nothing"])


def test_reduce_state_rejects_an_unknown_op() -> None:
    with pytest.raises(ValueError, match="unknown reduce op 'mean'"):
        reduce_state(Progress(), "mean")


def _count_leaves(node: Any, prefix: str = "") -> list[tuple[str, int]]:
    """(key path, value) of every count in a state, in state_dict order."""
    if type(node) is int:
        return [(prefix, node)]
    if isinstance(node, str):
        return []
    items = enumerate(node) if isinstance(node, list) else node.items()
    return [
        leaf
        for key, value in items
        if key not in ("schema_version", "ledger")  # the ledger is each rank's history, not a count
        for leaf in _count_leaves(value, f"{prefix}.{key}" if prefix else str(key))
    ]


def test_the_flat_layout_reduce_state_packs_is_every_count_of_the_state_dict_in_its_order() -> None:
    progress = _trained(batches=2, samples_per_batch=5)
    progress.train.optimizer_step(1)
    progress.train.optimizer_step_skipped(1)
    leaves = _count_leaves(progress.state_dict())
    assert count_paths(progress) == [path for path, _ in leaves]
    assert pack(progress) == [value for _, value in leaves]
