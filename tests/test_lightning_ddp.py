"""Lightning ``strategy="ddp"`` on 2 real CPU processes (gloo): every rank counted right, totals synced,
and a mid-epoch checkpoint written by rank 0 resumes every rank exactly.

Per configuration (plain; accumulating 3 batches) one uninterrupted run (24 samples, a
shuffling ``DistributedSampler`` injected by Lightning: 4 batches of 3 per rank and epoch,
2 epochs) saves checkpoints after train batches ``AT[config]``; fresh processes resume each
(see ``lightning_ddp_run.py``). The ranks seed their global RNGs differently and the loss
draws noise from it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("torchdata")

import torch

from tracker_core.integrations.lightning import GRADIENTS_KEY, STATE_KEY

from helpers.distributed_runs import (
    assert_each_rank_trains_its_half_of_every_epoch,
    assert_every_rank_resumed_exactly,
    assert_synced_totals,
    folder_once,
    free_port,
    rank_findings,
    run_script,
)
from helpers.lightning_ddp_run import AT, EPOCHS, SAMPLES

BATCHES = SAMPLES // 2 // 3 * EPOCHS  # per rank, over the run


def _run(folder: Path) -> None:
    for phase in ("straight", "resume"):
        run_script("lightning_ddp_run.py", phase, str(folder), env={"MASTER_PORT": str(free_port())})


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The straight run and the resumes; each rank's findings in ``<phase>-rank<r>.pt``."""
    return folder_once(tmp_path_factory, "lightning_ddp", _run)


@pytest.fixture(scope="module")
def straight(folder: Path) -> list[dict[str, Any]]:
    return [found["plain"] for found in rank_findings(folder, "straight")]


def test_each_rank_trains_its_own_half_of_every_shuffled_epoch(straight: list[dict[str, Any]]) -> None:
    assert_each_rank_trains_its_half_of_every_epoch(straight, SAMPLES, BATCHES, EPOCHS)


def test_each_ranks_counts_agree_with_lightning_on_that_rank(straight: list[dict[str, Any]]) -> None:
    for found in straight:
        lightning, tracker = found["lightning"], found["tracker"]
        assert tracker["global_step"] == lightning["global_step"] == BATCHES
        assert tracker["batches"] == lightning["batches"] == BATCHES
        assert tracker["epochs"] == lightning["epochs"] == EPOCHS
        assert tracker["samples"] == SAMPLES // 2 * EPOCHS


def test_synced_totals_sum_samples_over_ranks_and_agree_on_batches_per_rank(straight: list[dict[str, Any]]) -> None:
    assert_synced_totals(straight, SAMPLES * EPOCHS, BATCHES)


def test_checkpoint_written_by_rank_0_holds_every_ranks_entry(folder: Path) -> None:
    checkpoint = torch.load(folder / "plain-2.ckpt", weights_only=True)
    entry = checkpoint["callbacks"][STATE_KEY]
    assert len(entry["ranks"]) == 2
    assert entry["ranks"][0]["rng"] != entry["ranks"][1]["rng"]  # the ranks' global RNGs differ


def test_checkpoint_inside_an_accumulation_window_holds_each_ranks_partial_gradients(folder: Path) -> None:
    gradients = torch.load(folder / "accumulate-1.ckpt", weights_only=True)[GRADIENTS_KEY]["ranks"]
    assert len(gradients) == 2
    assert not all(torch.equal(a, b) for a, b in zip(*gradients))  # no_sync: each rank its own partial sums


def test_a_checkpoint_outside_an_accumulation_window_holds_no_gradients(folder: Path) -> None:
    assert GRADIENTS_KEY not in torch.load(folder / "plain-2.ckpt", weights_only=True)


@pytest.mark.parametrize(("config", "at"), [(config, at) for config, batches in AT.items() for at in batches])
def test_resume_from_a_checkpoint_after_batch_is_exact_on_every_rank(config: str, at: int, folder: Path) -> None:
    assert_every_rank_resumed_exactly(folder, f"{config}-{at}", config, at + 1)
