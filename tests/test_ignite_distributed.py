"""Ignite with ``ignite.distributed`` on 2 real processes (``idist.Parallel``, gloo): every rank counted right,
totals synced, and a mid-epoch checkpoint written by rank 0 resumes every rank exactly.

Per configuration (plain; a StatefulDataLoader; one accumulating 3 iterations) one uninterrupted run (24 samples,
``idist.auto_dataloader`` or a StatefulDataLoader with a shuffling ``DistributedSampler``: 4 batches of 3 per rank
and epoch, 2 epochs; the model is DDP with dropout) saves a ``Checkpoint`` after iterations
``AT[config]``; fresh processes resume each (see ``ignite_idist_run.py``). The ranks seed
their global RNGs differently. A StatefulDataLoader resumes exactly at every batch, a plain DataLoader at an epoch's
end; inside an epoch a plain one follows Ignite's own rule (warned).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ignite")
pytest.importorskip("torchdata")

import torch

from tracker_core.checkpoints import read_checkpoint

from helpers.distributed_runs import (
    assert_each_rank_trains_its_half_of_every_epoch,
    assert_every_rank_resumed_exactly,
    assert_synced_totals,
    folder_once,
    free_port,
    rank_findings,
    run_script,
)
from helpers.ignite_idist_run import AT, EPOCHS, SAMPLES, STATEFUL

BATCHES = SAMPLES // 2 // 3 * EPOCHS  # per rank, over the run


def _run(folder: Path) -> None:
    run_script("ignite_idist_run.py", str(folder), env={"MASTER_PORT": str(free_port())})


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The straight run and the resumes; each rank's findings in ``<phase>-rank<r>.pt``."""
    return folder_once(tmp_path_factory, "ignite_idist", _run)


@pytest.fixture(scope="module")
def straight(folder: Path) -> list[dict[str, Any]]:
    return [found["plain"] for found in rank_findings(folder, "straight")]


def test_each_rank_trains_its_own_half_of_every_shuffled_epoch(straight: list[dict[str, Any]]) -> None:
    assert_each_rank_trains_its_half_of_every_epoch(straight, SAMPLES, BATCHES, EPOCHS)


def test_each_ranks_counts_agree_with_ignite_on_that_rank(straight: list[dict[str, Any]]) -> None:
    for found in straight:
        ignite, tracker = found["ignite"], found["tracker"]
        assert tracker["global_step"] == tracker["batches"] == ignite["iteration"] == BATCHES
        assert tracker["epochs"] == ignite["epoch"] == EPOCHS
        assert tracker["samples"] == SAMPLES // 2 * EPOCHS


def test_synced_totals_sum_samples_over_ranks_and_agree_on_batches_per_rank(straight: list[dict[str, Any]]) -> None:
    assert_synced_totals(straight, SAMPLES * EPOCHS, BATCHES)


def test_ranks_with_uneven_data_are_named_with_their_counts_at_the_epoch_end(folder: Path) -> None:
    expected = [
        "stages.train.batches.run.processed differs across ranks: rank 0 = 2, rank 1 = 3",
        "stages.train.batches.epoch.processed differs across ranks: rank 0 = 2, rank 1 = 3",
    ]
    for rank in range(2):
        assert torch.load(folder / f"uneven-rank{rank}.pt", weights_only=True) == [expected]


def test_checkpoint_written_by_rank_0_holds_an_index_and_each_ranks_entry_in_its_own_file(folder: Path) -> None:
    entry = torch.load(folder / "plain-3.pt", weights_only=True)["progress"]["progress_tracker"]
    index = entry["ranks"]
    files = [folder / index["rank_files"] / f"rank-{rank}.json" for rank in range(2)]
    ranks = [json.loads(file.read_text())["entry"] for file in files]

    assert index["rank_files"] == f"plain-3.pt.ranks/{index['save_id']}"
    assert {key: value for key, value in entry.items() if key != "ranks"} == ranks[0]
    assert ranks[0]["rng"] != ranks[1]["rng"]  # the ranks' global RNGs differ


def test_inspect_reads_each_ranks_entry_of_an_ignite_checkpoint_from_its_file(folder: Path) -> None:
    checkpoint = read_checkpoint(folder / "plain-3.pt")

    assert checkpoint.format == "ignite" and len(checkpoint.entries) == 2
    assert checkpoint.rank_files is not None and checkpoint.rank_files in checkpoint.location


EXACT = [(config, at) for config, iterations in AT.items() for at in iterations if config in STATEFUL] + [("plain", 4)]


@pytest.mark.parametrize(("config", "at"), EXACT)
def test_resume_from_a_checkpoint_after_iteration_is_exact_on_every_rank(config: str, at: int, folder: Path) -> None:
    for rank, (run, straight) in enumerate(assert_every_rank_resumed_exactly(folder, f"{config}-{at}", config, at)):
        assert run["ignite"] == straight["ignite"], f"rank {rank}"
        assert run["warnings"] == [], f"rank {rank}"


@pytest.mark.parametrize("at", [at for at in AT["plain"] if at % 4])
def test_a_plain_loader_resumed_mid_epoch_follows_ignites_rule_and_counters_on_every_rank(
    at: int, folder: Path
) -> None:
    # Ignite's rule: a fresh iter(dataloader) reads the epoch's remaining 4 - k iterations from its first batch.
    k = at % 4
    for rank, (resumed, reference) in enumerate(
        zip(rank_findings(folder, "resume"), rank_findings(folder, "straight"), strict=True)
    ):
        run, straight = resumed[f"plain-{at}"], reference["plain"]
        (warning,) = run["warnings"]
        assert re.match(rf"resuming DataLoader .* after {k} batches of an epoch", warning), f"rank {rank}"
        assert "StatefulDataLoader" in warning
        assert run["ignite"] == straight["ignite"], f"rank {rank}"
        assert all(seen["ignite"][:2] == seen["expected"][:2] for seen in run["agreement"]), f"rank {rank}"
        assert run["tracker"] == straight["tracker"] | {"samples": run["tracker"]["samples"]}, f"rank {rank}"
        assert len(run["seen"]) == len(straight["seen"]) - at, f"rank {rank}"
        # A DistributedSampler's order is fixed by its seed and epoch: the epoch is read again from its first batch.
        assert run["seen"][: 4 - k] == straight["seen"][at - k : at - k + 4 - k], f"rank {rank}"
