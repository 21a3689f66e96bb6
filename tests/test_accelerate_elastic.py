"""An Accelerate checkpoint saved by 2 processes resumes on 1 (and one saved by 1 on 2).

2 real processes (gloo) train ``Indexed(24)`` in batches of 3 per process with
``use_seedable_sampler=True`` (accumulation 2, 3 epochs) and ``save_state`` after 2 batches of
epoch 1 (global position 2 x 3 x 2 = 12 of that epoch's order) and after its last batch. One
process then loads them with batches of 6, 2 or 5 (tests/helpers/accelerate_two_ranks.py ``elastic_run``
runs both sides). The 2-process run also loads a 1-process checkpoint (batches of 6, position 12).

The loaders are plain (an elastic resume refuses ``use_stateful_dataloader``): a checkpoint after an epoch's last
batch resumes at the same global sample; one inside an epoch restarts that epoch from its first batch (Accelerate's
loop reads a plain loader whole), in the saved epoch's order at the new geometry, with one InexactResumeWarning at the
load; its counts are mapped by global samples (``k' = floor(k * b * W / (b' * W'))``) and the mapping says ``exact: False``.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("accelerate")

import torch

from tracker_core import ProgressStateError

from helpers.accelerate_two_ranks import ELASTIC_SAMPLES, ELASTIC_STOP, elastic_run, elastic_setup
from helpers.distributed_runs import folder_once, free_port, run_script

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")

EPOCH = ELASTIC_STOP[0]  # the interrupted epoch
RESUMED_BATCHES = (6, 2, 5)  # per process after the resume; 5 does not divide the global position 12


def _fill(folder: Path) -> None:
    one = {"saved": elastic_run(6, stop=ELASTIC_STOP, save_dir=str(folder / "world1"))}
    port = str(free_port())

    def rank(index: int) -> None:
        env = {
            "MASTER_PORT": port,
            "RANK": str(index),
            "WORLD_SIZE": "2",
            "LOCAL_RANK": str(index),
            "LOCAL_WORLD_SIZE": "2",
        }
        run_script(
            "accelerate_two_ranks.py",
            str(folder / "world2"),
            str(folder / f"rank{index}.pt"),
            "elastic",
            str(folder / "world1"),
            env=env,
            timeout=240,
        )

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(rank, range(2)))
    for batch in RESUMED_BATCHES:
        one[f"straight{batch}"] = elastic_run(batch)
        one[f"resumed{batch}"] = elastic_run(batch, load_dir=str(folder / "world2"))
    one["resumed_after_the_epoch"] = elastic_run(5, load_dir=str(folder / "world2_end"))
    one["resumed6_after_the_epoch"] = elastic_run(6, load_dir=str(folder / "world2_end"))
    torch.save(one, folder / "world1.pt")


Runs = tuple[dict[str, Any], list[dict[str, Any]], Path]  # the 1-process runs, each rank's runs, their folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    folder = folder_once(tmp_path_factory, "accelerate_elastic", _fill)
    ranks = [torch.load(folder / f"rank{index}.pt", weights_only=True) for index in range(2)]
    return torch.load(folder / "world1.pt", weights_only=True), ranks, folder


def _epoch(run: dict[str, Any], epoch: int) -> list[list[int]]:
    return [b["ids"] for b in run["batches"] if b["epoch"] == epoch]


def _ids(batches: list[list[int]]) -> list[int]:
    return [i for batch in batches for i in batch]


_RESTARTED = (
    "^elastic resume: train dataloader 0: saved inside an epoch, after 12 of its samples: "
    "a plain DataLoader has no position of its own"
)
_PROBLEM = "saved inside an epoch, after 12 of its samples: a plain DataLoader has no position of its own"


@pytest.mark.parametrize("batch", [6, 2])
def test_two_processes_x_3_saved_inside_an_epoch_resume_on_one_by_restarting_that_epoch_in_its_order(runs, batch):
    one = runs[0]
    resumed = one[f"resumed{batch}"]
    assert _epoch(resumed, EPOCH) == _epoch(one[f"straight{batch}"], EPOCH)  # the seedable order, from its start
    assert len(resumed["warnings"]) == 1
    assert re.match(_RESTARTED, resumed["warnings"][0])


def test_the_resume_mapping_says_how_the_position_was_mapped_and_that_it_is_not_exact(runs):
    mapping = runs[0]["resumed2"]["mapping"]
    problem = mapping["train_loaders"][0].pop("problem")
    assert mapping == {
        "saved_world_size": 2,
        "world_size": 1,
        "rank": 0,
        "source_rank": 0,
        "train_loaders": [{"index": 0, "samples_consumed": 12, "batch_size": 2, "batches_consumed": 6, "exact": False}],
    }
    assert problem.startswith(_PROBLEM)
    assert "its counts continue from batch 6" in problem


@pytest.mark.parametrize("batch", [6, 2])
def test_accelerates_own_counters_agree_with_the_tracker_after_the_resume_and_at_the_end(runs, batch):
    """``accelerator.step`` counts the pass's micro-batches (0 after its last), ``loader.iteration`` the epochs."""
    found = runs[0][f"resumed{batch}"]
    mapped = found["mapping"]["train_loaders"][0]["batches_consumed"]
    for trained in found["batches"]:
        went_on = mapped if trained["epoch"] == EPOCH else 0  # the restarted epoch's step goes on from the mapped one
        assert trained["step"] == (0 if trained["end_of_dataloader"] else went_on + trained["tracker_batches"])
        assert trained["iteration"] == trained["epoch"]
    assert found["end"]["iteration"] == found["end"]["epoch_index"] == 3


@pytest.mark.parametrize("batch", [6, 2])
def test_later_epochs_run_whole_at_the_new_world_size(runs, batch):
    one = runs[0]
    assert _epoch(one[f"resumed{batch}"], EPOCH + 1) == _epoch(one[f"straight{batch}"], EPOCH + 1)


def test_the_same_global_batch_trains_the_weights_of_an_uninterrupted_run_at_the_new_geometry(runs):
    """2 x 3 -> 1 x 6 after the last batch of epoch 1: every optimizer step averages the same 12 samples (DDP averages
    over the ranks)."""
    one = runs[0]
    resumed, straight = one["resumed6_after_the_epoch"], one["straight6"]
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(resumed["weights"], straight["weights"], strict=True))
    assert resumed["end"] == straight["end"]  # the same optimizer steps as well


def test_a_position_off_the_new_global_batch_counts_the_whole_batches_before_it_and_the_epoch_restarts(runs):
    """Position 12 with batches of 5: ``k' = floor(12 / 5) = 2``, under the one warning of the mid-epoch resume."""
    one = runs[0]
    resumed = one["resumed5"]
    loader = resumed["mapping"]["train_loaders"][0]
    assert (loader["samples_consumed"], loader["batch_size"], loader["batches_consumed"]) == (12, 5, 2)
    assert loader["exact"] is False
    assert len(resumed["warnings"]) == 1
    assert re.match(_RESTARTED, resumed["warnings"][0])
    assert "its counts continue from batch 2" in resumed["warnings"][0]
    assert _epoch(resumed, EPOCH) == _epoch(one["straight5"], EPOCH)


def test_a_checkpoint_after_the_last_batch_of_an_epoch_resumes_with_nothing_left_of_it(runs):
    one = runs[0]
    resumed = one["resumed_after_the_epoch"]  # 2 x 4 batches of 3 trained; 5 batches of 5 (the last of 4) now
    assert resumed["mapping"]["train_loaders"][0] == {
        "index": 0,
        "samples_consumed": 24,
        "batch_size": 5,
        "batches_consumed": 5,
        "exact": True,
        "problem": "",
    }
    assert _epoch(resumed, EPOCH) == []
    assert _epoch(resumed, EPOCH + 1) == _epoch(one["straight5"], EPOCH + 1)
    assert all(b["step"] == (0 if b["end_of_dataloader"] else b["tracker_batches"]) for b in resumed["batches"])
    assert resumed["end"]["iteration"] == resumed["end"]["epoch_index"] == 3


def test_one_process_x_6_saved_inside_an_epoch_resumes_on_two_x_3_and_the_ranks_split_the_restarted_epoch(runs):
    _, ranks, _ = runs
    trained = []
    for found in ranks:
        resumed, straight = found["from_world_one"], found["straight"]
        assert resumed["mapping"]["train_loaders"][0]["batches_consumed"] == 2
        assert _epoch(resumed, EPOCH) == _epoch(straight, EPOCH)
        assert _epoch(resumed, EPOCH + 1) == _epoch(straight, EPOCH + 1)
        for b in resumed["batches"]:  # the restarted epoch's step goes on from the mapped one
            went_on = 2 if b["epoch"] == EPOCH else 0
            assert b["step"] == (0 if b["end_of_dataloader"] else went_on + b["tracker_batches"])
        trained += _ids(_epoch(resumed, EPOCH))
    assert sorted(trained) == list(range(ELASTIC_SAMPLES))


@pytest.mark.parametrize(
    ("options", "needs"),
    [
        ({"seedable": False}, "use_seedable_sampler=True"),
        ({"split_batches": True}, "split_batches=False"),
        ({"stateful": True}, "use_stateful_dataloader=False"),
    ],
    ids=["no-seedable-sampler", "split-batches", "stateful-dataloader"],
)
def test_an_unsupported_configuration_is_refused_before_anything_is_loaded(runs, options, needs):
    program = elastic_setup(6, **options)
    weights = [p.detach().clone() for p in program.model.parameters()]
    rng = torch.get_rng_state()
    before = program.progress.view.state_dict()
    with pytest.raises(ProgressStateError, match=needs) as caught:
        program.accelerator.load_state(str(runs[2] / "world2"))
    assert caught.value.key == "world_size"
    assert all(torch.equal(p, w) for p, w in zip(program.model.parameters(), weights, strict=True))
    assert torch.equal(torch.get_rng_state(), rng)
    assert program.progress.view.state_dict() == before
