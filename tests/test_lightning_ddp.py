"""Lightning ``strategy="ddp"`` on 2 real CPU processes (gloo): every rank counted right, totals synced,
and a mid-epoch checkpoint written by rank 0 resumes every rank exactly.

Per configuration (plain and accumulating 3 batches, with ``rank_files=True``; gathered: accumulating 3
batches without, the default) one uninterrupted run (24 samples, a torchdata ``StatefulDataLoader`` over a shuffling
``DistributedSampler``: 4 batches of 3 per rank and epoch, 2 epochs) saves checkpoints after train batches
``AT[config]``; fresh processes resume each (see ``lightning_ddp_run.py``). The ranks seed their global RNGs differently and the loss
draws noise from it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("torchdata")

import torch

from tracker_core import comparable_state
from tracker_core.checkpoints import read_checkpoint
from tracker_core.integrations.lightning import GRADIENTS_KEY, STATE_KEY

from helpers.conformance_only import MARKS
from helpers.distributed_runs import (
    assert_each_rank_trains_its_half_of_every_epoch,
    assert_every_rank_resumed_exactly,
    assert_synced_totals,
    folder_once,
    free_port,
    rank_findings,
    run_script,
)
from helpers.lightning_ddp_run import AT, EPOCHS, MODELS, SAMPLES

pytestmark = list(MARKS)  # runs long (two DDP launches): make conformance

BATCHES = SAMPLES // 2 // 3 * EPOCHS  # per rank, over the run


def _run(folder: Path) -> None:
    for phase in ("straight", "resume"):
        run_script("lightning_ddp_run.py", phase, str(folder), env={"MASTER_PORT": str(free_port())})
    save_id = torch.load(folder / "plain-2.ckpt", weights_only=True)["callbacks"][STATE_KEY]["ranks"]["save_id"]
    for rank in range(2):  # a copy of plain-2 with only rank r's file beside it (the original's folder moved away)
        own = folder / f"only-rank{rank}" / "plain-2.ckpt.ranks" / save_id
        own.mkdir(parents=True)
        shutil.copy(folder / "plain-2.ckpt", folder / f"only-rank{rank}")
        shutil.copy(folder / "plain-2.ckpt.ranks" / save_id / f"rank-{rank}.json", own)
    shutil.move(folder / "plain-2.ckpt.ranks", folder / "plain-2.ckpt.ranks-away")
    try:
        run_script("lightning_ddp_run.py", "own", str(folder), env={"MASTER_PORT": str(free_port())})
    finally:
        shutil.move(folder / "plain-2.ckpt.ranks-away", folder / "plain-2.ckpt.ranks")


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


def test_with_rank_files_the_checkpoint_holds_an_index_and_each_ranks_entry_in_its_own_file(folder: Path) -> None:
    entry = torch.load(folder / "plain-2.ckpt", weights_only=True)["callbacks"][STATE_KEY]
    index = entry["ranks"]
    files = [folder / index["rank_files"] / f"rank-{rank}.json" for rank in range(2)]
    ranks = [json.loads(file.read_text())["entry"] for file in files]

    assert index == {
        "rank_files": f"plain-2.ckpt.ranks/{index['save_id']}",
        "world_size": 2,
        "save_id": index["save_id"],
        "written_in": str(folder / "plain-2.ckpt.ranks" / index["save_id"]),
    }
    assert {key: value for key, value in entry.items() if key != "ranks"} == ranks[0]
    assert ranks[0]["rng"] != ranks[1]["rng"]  # the ranks' global RNGs differ
    assert [p.name for p in (folder / "plain-2.ckpt.ranks").iterdir()] == [index["save_id"]]  # one save there


def test_with_rank_files_a_checkpoint_inside_an_accumulation_window_keeps_each_ranks_gradients_in_its_own_file(
    folder: Path,
) -> None:
    index = torch.load(folder / "accumulate-1.ckpt", weights_only=True)[GRADIENTS_KEY]["ranks"]
    files = [folder / index["rank_files"] / f"gradients-{rank}.pt" for rank in range(2)]
    gradients = [torch.load(file, weights_only=True) for file in files]

    assert index["world_size"] == 2
    assert not all(torch.equal(a, b) for a, b in zip(*gradients))  # no_sync: each rank its own partial sums


def test_a_checkpoint_outside_an_accumulation_window_holds_no_gradients(folder: Path) -> None:
    assert GRADIENTS_KEY not in torch.load(folder / "plain-2.ckpt", weights_only=True)


def test_without_rank_files_rank_0s_checkpoint_holds_every_ranks_entry_and_partial_gradients(folder: Path) -> None:
    checkpoint = torch.load(folder / "gathered-1.ckpt", weights_only=True)
    entry, gradients = checkpoint["callbacks"][STATE_KEY], checkpoint[GRADIENTS_KEY]["ranks"]

    assert len(entry["ranks"]) == len(gradients) == 2
    assert {key: value for key, value in entry.items() if key != "ranks"} == entry["ranks"][0]
    assert entry["ranks"][0]["rng"] != entry["ranks"][1]["rng"]
    assert not all(torch.equal(a, b) for a, b in zip(*gradients))
    assert not list(folder.glob("gathered-*.ranks"))


def test_without_rank_files_model_checkpoints_folder_holds_only_lightnings_own_files(folder: Path) -> None:
    assert sorted(p.name for p in (folder / MODELS).iterdir()) == [
        "epoch=0-step=2.ckpt",
        "epoch=1-step=4.ckpt",
        "last.ckpt",
    ]


LAST_BATCH = [("plain", 3), ("gathered", 3)]  # checkpoints after the last batch of epoch 1


@pytest.mark.parametrize(
    ("config", "at"),
    [(config, at) for config, batches in AT.items() for at in batches],
)
def test_resume_from_a_checkpoint_after_batch_is_exact_on_every_rank(config: str, at: int, folder: Path) -> None:
    assert_every_rank_resumed_exactly(folder, f"{config}-{at}", config, at + 1)


@pytest.mark.parametrize(("config", "at"), LAST_BATCH)
def test_resume_after_an_epochs_last_batch_reads_the_next_epochs_order(config: str, at: int, folder: Path) -> None:
    """A StatefulDataLoader over a DistributedSampler saved after epoch 1's last batch: Lightning builds the resumed
    iterator before its fit loop's set_epoch(1); the adapter sets the samplers' epoch first, so epoch 2 reads its own
    order, as in the uninterrupted run."""
    per_epoch = BATCHES // EPOCHS
    for resumed, straight in zip(rank_findings(folder, "resume"), rank_findings(folder, "straight"), strict=True):
        seen = resumed[f"{config}-{at}"]["seen"]
        assert seen == straight[config]["seen"][per_epoch:] != straight[config]["seen"][:per_epoch]


def test_inspect_reads_each_ranks_entry_from_its_rank_file_and_says_where_they_are(folder: Path) -> None:
    checkpoint = read_checkpoint(folder / "plain-2.ckpt")

    assert len(checkpoint.entries) == 2
    assert checkpoint.rank_files is not None and checkpoint.rank_files in checkpoint.location
    assert checkpoint.entries[0]["rng"] != checkpoint.entries[1]["rng"]


def test_a_checkpoint_moved_and_renamed_with_its_rank_files_reads_them_from_beside_it(
    folder: Path, tmp_path: Path
) -> None:
    shutil.copy(folder / "plain-2.ckpt", tmp_path / "moved.ckpt")
    shutil.copytree(folder / "plain-2.ckpt.ranks", tmp_path / "moved.ckpt.ranks")

    checkpoint = read_checkpoint(tmp_path / "moved.ckpt")

    assert checkpoint.rank_files is not None and checkpoint.rank_files.startswith(str(tmp_path / "moved.ckpt.ranks"))
    assert len(checkpoint.entries) == 2


def test_each_rank_resumes_exactly_with_only_its_own_rank_file_beside_the_checkpoint(folder: Path) -> None:
    for own, resumed in zip(rank_findings(folder, "own"), rank_findings(folder, "resume"), strict=True):
        assert own["plain-2"]["seen"] == resumed["plain-2"]["seen"]
        assert comparable_state(own["plain-2"]["progress"]) == comparable_state(resumed["plain-2"]["progress"])
        assert all(torch.equal(a, b) for a, b in zip(own["plain-2"]["weights"], resumed["plain-2"]["weights"]))
