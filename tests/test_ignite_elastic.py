"""Elastic resume through the Ignite adapter: checkpoints of a 2-process ``idist.Parallel`` run (gloo, 2 ranks x
batch 3, ``ProgressHandler`` in ignite's ``Checkpoint``) resumed by 1 process at another per-rank batch size.

The 2-process run is tests/helpers/ignite_idist_run.py (24 samples, a shuffling ``DistributedSampler``:
4 batches of 3 per rank and epoch, 2 epochs; checkpoints after iterations 3, 4 and 6). One
process resumes them (tests/helpers/ignite_elastic_run.py) with ``idist.auto_dataloader`` given a
``DistributedSampler(num_replicas=1, rank=0, shuffle=True)`` and the loader passed to
``attach``. Sample positions: the single process reads an epoch's permutation in order,
which is the 2 ranks' batches interleaved (rank ``r`` reads positions ``r, r + 2, ...``).
A plain loader saved inside an epoch is mapped by its counts only (one
``InexactResumeWarning``; the rest of the epoch comes from a new iterator's first batches); a
StatefulDataLoader (``stateful-<iteration>.pt``) saved inside an epoch is refused, after its last batch it resumes
as a plain loader does. The other way round, an uninterrupted one-process run (batches of 6) saves after iterations
``GROW_AT`` and 2 processes (batches of 3 per rank) resume them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ignite")
pytest.importorskip("torchdata")

import torch
from ignite.engine import Engine
from ignite.handlers import Checkpoint

from tracker_core.checkpoints import read_checkpoint
from tracker_core.integrations.ignite import ProgressHandler

from helpers.conformance_only import MARKS
from helpers.distributed_runs import folder_once, free_port, rank_findings, run_script
from helpers.ignite_elastic_run import CASES, GROW_AT, ONE_AT
from helpers.ignite_idist_run import EPOCHS, SAMPLES
from helpers.ledger import without_ledger

pytestmark = list(MARKS)  # runs long (two-process launches): make conformance

PER_RANK = 3  # the saved run's batch size per rank
SAVED_BATCHES = SAMPLES // 2 // PER_RANK  # per rank and epoch when saved
INSIDE = [name for name in CASES if name.startswith("mid-epoch")]  # plain loaders saved inside an epoch


def _inside(samples: int, batches: int) -> str:
    """The problem of a plain loader saved inside an epoch, after ``samples`` global samples, resumed at ``batches``."""
    return (
        f"saved inside an epoch, after {samples} of its samples: a plain DataLoader has no position of its own, "
        f"so the rest of the epoch is read by the framework's own rule (from a new iterator's first batch, with "
        f"another order), not from sample {samples}; its counts continue from batch {batches}. Checkpoint between "
        "epochs to resume exactly at another world size"
    )


def _saved_run(folder: Path) -> None:
    run_script("ignite_idist_run.py", str(folder), env={"MASTER_PORT": str(free_port())})


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """The 2-process run (shared with tests/test_ignite_distributed.py): its folder and each rank's findings."""
    folder = folder_once(tmp_path_factory, "ignite_idist", _saved_run)
    return folder, [found["plain"] for found in rank_findings(folder, "straight")]


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory, straight: tuple[Path, list[dict[str, Any]]]) -> dict[str, Any]:
    """Each case of ignite_elastic_run.CASES resumed at world size 1: its findings, warnings or error."""
    saved = straight[0]
    folder = folder_once(
        tmp_path_factory,
        "ignite_elastic",
        lambda out: run_script("ignite_elastic_run.py", str(saved), str(out), env={"MASTER_PORT": str(free_port())}),
    )
    found = torch.load(folder / "elastic.pt", weights_only=True)
    found["grown"] = rank_findings(folder, "grow")
    found["folder"] = folder
    return found


def _epoch_order(ranks: list[dict[str, Any]], epoch: int) -> list[int]:
    """Epoch ``epoch``'s permutation (0-based), read off the 2 ranks' batches: position 2m + r = rank r's m-th id."""
    halves = [sum(r["seen"][epoch * SAVED_BATCHES : (epoch + 1) * SAVED_BATCHES], []) for r in ranks]
    return [halves[position % 2][position // 2] for position in range(SAMPLES)]


def _geometry(name: str) -> tuple[int, int, int, int]:
    """(saved epoch 0-based, its batches done per rank when saved, new batch size, new batches per epoch)."""
    iteration, batch, _ = CASES[name]
    epoch = (iteration - 1) // SAVED_BATCHES
    return epoch, iteration - epoch * SAVED_BATCHES, batch, SAMPLES // batch


@pytest.mark.parametrize("name", ["last-batch-of-epoch-1-batch-2", "stateful-last-batch-of-epoch-1-batch-2"])
def test_a_finished_epoch_resumes_exactly_with_the_next_epoch_whole(
    name: str, straight: tuple[Path, list[dict[str, Any]]], resumed: dict[str, Any]
) -> None:
    """Saved after epoch 1's last batch on 2 ranks (Ignite's EPOCH_COMPLETED not yet fired): the single process
    trains epoch 2 whole, in its own order; a StatefulDataLoader's own state is not needed."""
    found = resumed[name]
    assert found["warnings"] == []
    assert found["mapping"]["train_loaders"][0]["exact"] is True
    assert sum(found["seen"], []) == _epoch_order(straight[1], 1)


@pytest.mark.parametrize("name", INSIDE)
def test_plain_loader_saved_inside_an_epoch_reads_the_rest_of_it_from_the_first_batches_of_the_epochs_order(
    name: str, straight: tuple[Path, list[dict[str, Any]]], resumed: dict[str, Any]
) -> None:
    """No position to map: the counts continue from batch k' = P // b', and a new iterator of the same epoch
    (same seed and epoch: the same permutation) gives the remaining N' - k' batches from its first one."""
    epoch, done, batch, per_epoch = _geometry(name)
    resumed_at = done * PER_RANK * 2 // batch
    assert resumed[name]["mapping"]["train_loaders"][0]["batches_consumed"] == resumed_at
    after = sum(resumed[name]["seen"][: per_epoch - resumed_at], [])
    assert after == _epoch_order(straight[1], epoch)[: (per_epoch - resumed_at) * batch]


@pytest.mark.parametrize("name", [name for name in INSIDE if _geometry(name)[0] == 0])
def test_after_a_plain_mid_epoch_resume_ignite_carries_its_unfinished_iterator_into_the_next_epoch(
    name: str, straight: tuple[Path, list[dict[str, Any]]], resumed: dict[str, Any]
) -> None:
    """Ignite's own rule: an epoch that ends (epoch_length) before its iterator is exhausted leaves it to the
    next epoch. The resumed epoch 1 read the first N' - k' batches of epoch 1's order, so epoch 2 reads the rest
    of that order, then the first N' - k' batches of epoch 2's (the sampler's set_epoch came before)."""
    _, done, batch, per_epoch = _geometry(name)
    left = per_epoch - done * PER_RANK * 2 // batch  # batches the resumed epoch read
    epoch_2 = resumed[name]["seen"][left:]
    assert len(epoch_2) == per_epoch
    read = left * batch
    assert sum(epoch_2, []) == _epoch_order(straight[1], 0)[read:] + _epoch_order(straight[1], 1)[:read]


def test_resume_mapping_says_how_the_checkpoint_was_mapped(resumed: dict[str, Any]) -> None:
    assert resumed["mid-epoch-2-batch-2"]["mapping"] == {
        "saved_world_size": 2,
        "world_size": 1,
        "rank": 0,
        "source_rank": 0,
        "train_loaders": [
            {
                "index": 0,
                "samples_consumed": 12,
                "batch_size": 2,
                "batches_consumed": 6,
                "exact": False,
                "problem": _inside(12, 6),
            }
        ],
    }


@pytest.mark.parametrize("name", [*INSIDE, "last-batch-of-epoch-1-batch-2", "stateful-last-batch-of-epoch-1-batch-2"])
def test_ignite_counters_agree_with_the_tracker_from_started_to_the_end(name: str, resumed: dict[str, Any]) -> None:
    """At STARTED and each EPOCH_COMPLETED: iteration = train batches of the run, epoch = epochs completed,
    epoch_length = the new loader's length; the resumed epoch starts at the mapped batch."""
    found = resumed[name]
    agreement = found["agreement"]
    assert [a["ignite"] for a in agreement] == [a["expected"] for a in agreement]
    started = agreement[0]  # the first note after the load (STARTED, or the saved epoch's end it fires)
    assert started["epoch_batches"] == found["mapping"]["train_loaders"][0]["batches_consumed"]
    ignite, tracker = found["ignite"], found["tracker"]
    assert (ignite["iteration"], ignite["epoch"]) == (tracker["batches"], EPOCHS)
    assert ignite["epoch_length"] == _geometry(name)[3]
    assert tracker["epochs"] == EPOCHS


def test_plain_loader_saved_inside_an_epoch_warns_once_at_load_that_it_has_no_position(
    resumed: dict[str, Any],
) -> None:
    found = resumed["mid-epoch-1-batch-4"]  # position 18 of 24, batches of 4: counts continue from batch 4
    assert found["warnings"] == [["InexactResumeWarning", f"elastic resume: train dataloader 0: {_inside(18, 4)}"]]
    assert found["mapping"]["train_loaders"][0]["exact"] is False


def test_stateful_loader_saved_inside_an_epoch_is_refused_at_another_world_size(resumed: dict[str, Any]) -> None:
    """Its own state holds a rank's shard of the old geometry: nothing is loaded, no batch is trained."""
    found = resumed["stateful-mid-epoch-1-batch-2"]
    assert found["error"][:2] == ["ProgressStateError", "ranks.0.train_loaders.0.kind"]
    assert "resume at world size 2, or from a checkpoint between epochs" in found["error"][2]
    assert found["seen"] == []


def test_fewer_batches_per_epoch_than_saved_raises_before_any_batch(resumed: dict[str, Any]) -> None:
    """2 x 3 saved in epoch 2, resumed with batches of 12: Ignite's iteration would end the run early."""
    found = resumed["fewer-batches-per-epoch-batch-12"]
    assert found["error"][0] == "ValueError"
    assert "Ignite would stop before epoch 2" in found["error"][2]
    assert found["seen"] == []


def test_loader_without_distributed_sampler_raises_naming_the_key(resumed: dict[str, Any]) -> None:
    """At world size 1 idist.auto_dataloader adds no DistributedSampler: the position cannot be mapped."""
    found = resumed["auto-dataloader-without-sampler"]
    assert found["error"][:2] == ["ProgressStateError", "train_loaders.0"]
    assert "DistributedSampler" in found["error"][2]
    assert found["seen"] == []


def test_loader_not_given_to_attach_raises_naming_how_to_give_it(resumed: dict[str, Any]) -> None:
    found = resumed["loader-not-given-to-attach"]
    assert found["error"][:2] == ["ProgressStateError", "ranks"]
    assert "attach(trainer, ..., dataloader=loader)" in found["error"][2]
    assert found["seen"] == []


def _one_process_order(resumed: dict[str, Any], epoch: int) -> list[int]:
    """Epoch ``epoch``'s permutation (0-based), as the one-process run (4 batches of 6 per epoch) read it."""
    return sum(resumed["one-process"]["seen"][epoch * 4 : (epoch + 1) * 4], [])


@pytest.mark.parametrize("iteration", GROW_AT)
def test_one_process_checkpoint_resumed_on_two_ranks_reads_the_rest_of_the_epoch_from_each_ranks_first_batches(
    iteration: int, resumed: dict[str, Any]
) -> None:
    """Saved inside an epoch (a plain loader): each rank counts 2 batches done and reads its 2 remaining ones
    from the start of the same epoch's order (rank r: positions r, r + 2, ...), warned once."""
    order = _one_process_order(resumed, (iteration - 1) // 4)
    for rank, found in enumerate(resumed["grown"]):
        run = found[iteration]
        assert sum(run["seen"][:2], []) == order[rank:12:2], f"rank {rank}"
        assert run["warnings"] == [["InexactResumeWarning", f"elastic resume: train dataloader 0: {_inside(12, 2)}"]]


def test_later_epochs_on_two_ranks_carry_each_ranks_unfinished_iterator_on(resumed: dict[str, Any]) -> None:
    """Resumed 2 batches into epoch 1, each rank read the first 2 of its 4: epoch 2 reads its last 2 of epoch 1's
    order, then its first 2 of epoch 2's (Ignite's rule, as in one process)."""
    first, second = _one_process_order(resumed, 0), _one_process_order(resumed, 1)
    for rank, found in enumerate(resumed["grown"]):
        assert sum(found[GROW_AT[0]]["seen"][2:], []) == first[rank::2][6:] + second[rank::2][:6], f"rank {rank}"


@pytest.mark.parametrize("iteration", GROW_AT)
def test_two_ranks_counters_agree_with_the_tracker_and_say_how_each_rank_was_mapped(
    iteration: int, resumed: dict[str, Any]
) -> None:
    for rank, found in enumerate(resumed["grown"]):
        run = found[iteration]
        assert [a["ignite"] for a in run["agreement"]] == [a["expected"] for a in run["agreement"]]
        assert run["agreement"][0]["epoch_batches"] == 2
        assert (run["ignite"]["iteration"], run["ignite"]["epoch"]) == (run["tracker"]["batches"], EPOCHS)
        assert run["mapping"] == {
            "saved_world_size": 1,
            "world_size": 2,
            "rank": rank,
            "source_rank": 0,
            "train_loaders": [
                {
                    "index": 0,
                    "samples_consumed": 12,
                    "batch_size": 3,
                    "batches_consumed": 2,
                    "exact": False,
                    "problem": _inside(12, 2),
                }
            ],
        }


def test_one_process_with_a_distributed_sampler_still_resumes_exactly_in_one_process(resumed: dict[str, Any]) -> None:
    """Saved after an epoch's last batch (a plain loader is exact there), its checkpoint carries every rank's entry
    (one) for elastic resume; at world size 1 nothing is mapped."""
    entry = torch.load(resumed["folder"] / f"one-{ONE_AT}.pt", weights_only=True)["progress"]["progress_tracker"]
    assert len(entry["ranks"]) == 1
    found, straight = resumed["one-process-resumed"], resumed["one-process"]
    assert found["mapping"] is None
    assert found["seen"] == straight["seen"][ONE_AT:]
    assert all(torch.equal(a, b) for a, b in zip(found["weights"], straight["weights"], strict=True))
    assert without_ledger(found["progress"]) == without_ledger(straight["progress"])
    assert found["ignite"] == straight["ignite"]


def _evaluator_only(straight: tuple[Path, list[dict[str, Any]]]) -> tuple[Any, Any]:
    """A ProgressHandler attached to an evaluator only, loaded in this (single) process from the
    2-process checkpoint after iteration 3 (mid epoch 1)."""
    handler = ProgressHandler()
    evaluator = Engine(lambda engine, batch: None)
    handler.attach(evaluator, stage="validate")
    Checkpoint.load_objects({"progress": handler}, torch.load(straight[0] / "plain-3.pt", weights_only=True))
    return handler, evaluator


def test_an_evaluator_only_handler_loads_a_checkpoint_of_another_world_size_as_saved_rank_0s_progress(
    straight: tuple[Path, list[dict[str, Any]]],
) -> None:
    handler, evaluator = _evaluator_only(straight)
    saved = read_checkpoint(straight[0] / "plain-3.pt").entries[0]  # rank 0's, from its rank file
    assert handler.view.state_dict() == saved["progress"]
    evaluator.run([0, 1, 2], max_epochs=1)
    assert handler.view.validate.batches.run.completed == 3


def test_attaching_a_trainer_after_a_load_for_evaluation_raises(straight: tuple[Path, list[dict[str, Any]]]) -> None:
    handler, _ = _evaluator_only(straight)
    with pytest.raises(ValueError, match="loaded for evaluation"):
        handler.attach(Engine(lambda engine, batch: None))
