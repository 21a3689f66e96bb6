"""Lightning ``strategy="ddp"`` checkpoints resumed at another world size, by global samples.

2 CPU processes (gloo) fit 24 samples in batches of 3 per rank (a shuffling DistributedSampler
injected by Lightning: 4 batches per rank and epoch, 2 epochs) and checkpoint mid epoch 0 after
1, 2 and 4 batches per rank (and, accumulating 2 batches, after 3). One process resumes them
(``strategy="ddp", devices=1`` or its own ``DistributedSampler(num_replicas=1)``) with batches of
6, 4 or 2; a 1-process checkpoint is resumed on 2 processes. See ``lightning_elastic_run.py``.

The loaders are plain: a checkpoint after an epoch's last batch resumes exactly; one inside an
epoch has only its counts mapped by global samples (``k' = floor(k * b * W / (b' * W'))``), with
one ``InexactResumeWarning`` at the load and ``exact: False`` in the mapping, and Lightning reads
the epoch's remaining ``N' - k'`` batches from a new iterator's first batch.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("torchdata")

import torch

from helpers.conformance_only import MARKS
from helpers.distributed_runs import folder_once, free_port, run_script
from helpers.lightning_elastic_run import BATCH, CASES, SAMPLES

pytestmark = list(MARKS)  # runs long (two-process launches): make conformance

BEFORE = {"k1.ckpt": 1, "step=2.ckpt": 2, "step=4.ckpt": 4}  # batches per rank each checkpoint came after
INSIDE = ["own-sampler-x6", "k2-x6", "k2-x2", "k1-x2"]  # saved inside epoch 0, at a multiple of the new batch
EXACT = [*INSIDE, "end-x2"]  # end-x2: saved after the epoch's last batch
RESUMED = [*EXACT, "k1-x4"]


def _fill(folder: Path) -> None:
    for phase in ("two", "one", "grow"):
        run_script("lightning_elastic_run.py", phase, str(folder), env={"MASTER_PORT": str(free_port())})


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return folder_once(tmp_path_factory, "lightning_elastic", _fill)


@functools.cache
def _found(folder: Path, phase: str, rank: int = 0) -> dict[str, Any]:
    """What process ``rank`` of ``phase`` saw (read once)."""
    found: dict[str, Any] = torch.load(folder / f"{phase}-rank{rank}.pt", weights_only=True)
    return found


def _ids(batches: list[tuple[int, list[int]]], epoch: int, first: int | None = None) -> list[int]:
    """The sample ids of ``epoch`` (of its first ``first`` batches), in order."""
    return sum([ids for e, ids in batches if e == epoch][:first], [])


def _order(folder: Path) -> list[int]:
    """Epoch 0's order at world size 1 (seed 0): the ids of the uninterrupted 1-process run's epoch 0."""
    return _ids(_found(folder, "one")["save"]["batches"], 0)


def _warning(samples: int, mapped: int) -> str:
    """The start of the one warning of a plain loader's elastic resume inside an epoch, and its end."""
    return (
        f"elastic resume: train dataloader 0: saved inside an epoch, after {samples} of its samples: "
        f"a plain DataLoader has no position of its own, so the rest of the epoch is read by the framework's own rule"
        f" (from a new iterator's first batch, with another order), not from sample {samples}; its counts continue "
        f"from batch {mapped}. Checkpoint between epochs to resume exactly at another world size"
    )


@pytest.mark.parametrize("case", INSIDE)
def test_interrupted_epoch_resumes_with_its_remaining_batches_from_the_first_of_a_new_iterator(
    folder: Path, case: str
) -> None:
    checkpoint, batch, _ = CASES[case]
    resumed = _found(folder, "one")[case]
    remaining = (SAMPLES - BEFORE[checkpoint] * BATCH * 2) // batch  # N' - k'
    assert _ids(resumed["batches"], 0) == _order(folder)[: remaining * batch]
    assert all(len(ids) == batch for _, ids in resumed["batches"])
    assert resumed["inexact"] == [_warning(BEFORE[checkpoint] * BATCH * 2, SAMPLES // batch - remaining)]


def test_a_checkpoint_after_the_last_batch_of_an_epoch_resumes_with_nothing_left_of_it_and_no_warning(
    folder: Path,
) -> None:
    resumed = _found(folder, "one")["end-x2"]
    assert _ids(resumed["batches"], 0) == []
    assert resumed["inexact"] == []


@pytest.mark.parametrize("case", EXACT)
def test_resume_mapping_names_the_global_sample_position_the_new_batch_count_and_whether_it_is_exact(
    folder: Path, case: str
) -> None:
    checkpoint, batch, _ = CASES[case]
    samples = BEFORE[checkpoint] * BATCH * 2
    inside = case in INSIDE
    problem = _warning(samples, samples // batch).removeprefix("elastic resume: train dataloader 0: ")
    assert _found(folder, "one")[case]["mapping"] == {
        "saved_world_size": 2,
        "world_size": 1,
        "rank": 0,
        "source_rank": 0,
        "train_loaders": [
            {
                "index": 0,
                "samples_consumed": samples,
                "batch_size": batch,
                "batches_consumed": samples // batch,
                "exact": not inside,
                "problem": problem if inside else "",
            }
        ],
    }


@pytest.mark.parametrize("case", RESUMED)
def test_lightning_loop_counters_agree_with_the_tracker_at_the_first_resumed_batch_and_at_the_end(
    folder: Path, case: str
) -> None:
    resumed = _found(folder, "one")[case]
    for when in ("first", "end"):
        assert resumed[when]["lightning"] == resumed[when]["tracker"], when
    mapped = resumed["mapping"]["train_loaders"][0]["batches_consumed"]
    if mapped * CASES[case][1] < SAMPLES:  # mid epoch: the first resumed batch follows the mapped ones
        assert resumed["first"]["lightning"]["batch_idx"] == mapped


@pytest.mark.parametrize("case", EXACT)
def test_global_step_counts_the_optimizer_steps_taken_at_both_world_sizes(folder: Path, case: str) -> None:
    checkpoint, _batch, _ = CASES[case]
    resumed = _found(folder, "one")[case]
    steps_after = len(resumed["batches"])  # one optimizer, no accumulation: a step per batch
    assert resumed["end"]["lightning"]["global_step"] == BEFORE[checkpoint] + steps_after


@pytest.mark.parametrize("case", RESUMED)
def test_later_epochs_run_whole_at_the_new_world_size(folder: Path, case: str) -> None:
    batch = CASES[case][1]
    resumed = _found(folder, "one")[case]
    epoch_1 = [ids for epoch, ids in resumed["batches"] if epoch == 1]
    assert len(epoch_1) == SAMPLES // batch
    assert sorted(sum(epoch_1, [])) == list(range(SAMPLES))


def test_a_position_off_the_new_global_batch_counts_the_whole_new_batches_before_it(folder: Path) -> None:
    resumed = _found(folder, "one")["k1-x4"]  # 6 samples in, batches of 4: k' = floor(6 / 4) = 1
    record = resumed["mapping"]["train_loaders"][0]
    assert (record["samples_consumed"], record["batches_consumed"], record["exact"]) == (6, 1, False)
    assert resumed["inexact"] == [_warning(6, 1)]
    assert resumed["first"]["lightning"]["batch_idx"] == 1
    assert _ids(resumed["batches"], 0) == _order(folder)[: (SAMPLES // 4 - 1) * 4]


def test_a_checkpoint_inside_an_accumulation_window_warns_of_the_window_as_well(folder: Path) -> None:
    resumed = _found(folder, "one")["accumulate"]  # 3 batches of 3 per rank, accumulating 2: 1 batch in a window
    assert resumed["inexact"] == [
        "elastic resume: saved inside a gradient accumulation window: its partial gradients belong to the old world size",
        _warning(18, 3),
    ]
    assert _ids(resumed["batches"], 0) == _order(folder)[:6]  # k' = 3 of 4 batches of 6: the new order's first
    for when in ("first", "end"):
        assert resumed[when]["lightning"] == resumed[when]["tracker"], when


def test_without_a_distributed_sampler_the_resume_fails_before_any_batch(folder: Path) -> None:
    resumed = _found(folder, "one")["plain-x6"]  # Trainer(devices=1) without DDP: a plain shuffling loader
    assert resumed["error"]["key"] == "train_loaders.0"
    assert "DistributedSampler" in resumed["error"]["message"]
    assert "strategy='ddp'" in resumed["error"]["message"]
    assert resumed["batches"] == []


def test_a_stateful_dataloader_saved_inside_an_epoch_is_refused_before_any_batch(folder: Path) -> None:
    resumed = _found(folder, "one")["stateful"]  # saved after 1 batch per rank, resumed on 1 process with batches of 6
    assert resumed["error"]["key"] == "ranks.0.train_loaders.0.kind"
    assert "resume at world size 2, or from a checkpoint between epochs" in resumed["error"]["message"]
    assert resumed["batches"] == []
    assert resumed["inexact"] == []


def test_a_mid_epoch_resume_with_several_train_loaders_fails_before_any_batch(folder: Path) -> None:
    resumed = _found(folder, "one")["two-loaders-x6"]
    assert resumed["error"]["key"] == "ranks"
    assert "one train dataloader only; this fit has 2" in resumed["error"]["message"]
    assert resumed["batches"] == []


def test_a_one_process_checkpoint_inside_an_epoch_resumes_on_two_processes_with_each_ranks_first_batches(
    folder: Path,
) -> None:
    ranks = [_found(folder, "grow", rank) for rank in (0, 1)]  # GROW is step=4: 4 of 8 batches of 3, 12 samples
    assert [r["grow"]["rank"] for r in ranks] == [0, 1]
    for rank, found in enumerate(ranks):
        resumed = found["grow"]
        record = resumed["mapping"]["train_loaders"][0]
        assert (record["samples_consumed"], record["batches_consumed"], record["exact"]) == (12, 2, False)
        assert (resumed["mapping"]["rank"], resumed["mapping"]["source_rank"]) == (rank, 0)
        assert resumed["inexact"] == [_warning(12, 2)]
        # k' = 12 / (3 x 2) = 2 of 4: the other 2 are the rank's first of epoch 0 (as the 2-process run read them)
        assert _ids(resumed["batches"], 0) == _ids(_found(folder, "two", rank)["save"]["batches"], 0, 2)
        for when in ("first", "end"):
            assert resumed[when]["lightning"] == resumed[when]["tracker"], when
    assert sorted(sum((_ids(r["grow"]["batches"], 1) for r in ranks), [])) == list(range(SAMPLES))


def test_validating_a_two_process_checkpoint_in_one_process_loads_its_progress(folder: Path) -> None:
    validated = _found(folder, "one")["validate"]
    assert validated["error"] is None
    assert validated["train_batches"] == BEFORE["step=2.ckpt"]  # saved rank 0's own batches
    assert validated["validate_batches"] == SAMPLES // BATCH
