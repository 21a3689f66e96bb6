"""One checkpoint for every rank (Tracker.gathered_state_dict), resumed at the same or another world size.

A plain loop drives a Tracker over a DataLoader with a shuffled DistributedSampler (22
samples, batches of 3 per rank) for 3 epochs on 2 real gloo ranks, saving a gathered entry
after every batch of epoch 1. As Lightning and Ignite do, the loop ends an epoch when its batch
count reaches the loader's length. At the same world size a StatefulDataLoader resumes every rank
at its batch. At another world size (world size 1 with batches of 3, 2, 4 or 6, or a world-1
checkpoint at world size 2) a plain DataLoader has no position to map: its counts are mapped by
global samples, so the framework's counters continue from the same share of the epoch, and the
rest of the epoch is read from a new iterator's start (warned); a checkpoint between epochs, or
after an epoch's last batch (a StatefulDataLoader's too), resumes exactly.
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.distributed as dist
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

from tracker_core import InexactResumeWarning, ProgressStateError, Tracker

from helpers.gloo import run_on_two_ranks
from helpers.ids import Ids
from helpers.ledger import without_ledger

StatefulDataLoader = pytest.importorskip("torchdata.stateful_dataloader").StatefulDataLoader

SAMPLES = 22
BATCH = 3  # per rank at world size 2: 11 samples per rank, 4 batches (3, 3, 3, 2)
EPOCHS = 3
SAVED_EPOCH = 1
SEED = 7


def _loader(batch: int, world: int, rank: int, seed: int = SEED) -> DataLoader[int]:
    dataset = Ids(SAMPLES)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, seed=seed, shuffle=True)
    return DataLoader(dataset, batch_size=batch, sampler=sampler)


def _stateful_loader(batch: int, world: int, rank: int) -> DataLoader[int]:
    """As :func:`_loader`, a StatefulDataLoader: its own state resumes it at its batch."""
    dataset = Ids(SAMPLES)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, seed=SEED, shuffle=True)
    return StatefulDataLoader(dataset, batch_size=batch, sampler=sampler)


Epochs = list[list[list[int]]]  # [epoch][batch] -> sample ids
Saved = dict[int | str, Any]  # batches of the epoch done (or "end") -> gathered entry


def _train(tracker: Tracker, loader: DataLoader[int], *, save_in: int | None = None) -> tuple[Epochs, Saved]:
    """Run (or continue) a fit of EPOCHS epochs; return each epoch's batches and, in epoch ``save_in``,
    the gathered entry after each batch (keyed by the epoch's batch count) and after its end ("end")."""
    progress, view = tracker.progress, tracker.view
    train = progress.train
    epochs: Epochs = []
    saved: Saved = {}
    progress.run_ready("fit")
    progress.run_started()
    while view.epoch_index < EPOCHS:
        train.epoch_ready()
        train.epoch_started()
        _epoch_sampler(loader).set_epoch(view.epoch_index)
        batches = []
        remaining = len(loader) - view.train.batches.epoch.completed  # the epoch ends at its length
        for batch in itertools.islice(loader, remaining) if remaining > 0 else ():
            train.batch_ready()
            train.batch_started()
            batches.append(batch.tolist())
            train.optimizer_step()
            train.batch_processed(len(batch))
            train.batch_completed()
            if view.epoch_index == save_in:
                saved[view.train.batches.epoch.completed] = _json(tracker.gathered_state_dict())
        epochs.append(batches)
        train.epoch_processed()
        train.epoch_completed()
        if view.epoch_index - 1 == save_in:
            saved["end"] = _json(tracker.gathered_state_dict())
    progress.run_processed()
    progress.run_completed()
    return epochs, saved


def _epoch_sampler(loader: DataLoader[int]) -> Any:
    """The sampler whose ``set_epoch`` fixes the epoch's order (as the framework would call it)."""
    return loader.sampler if isinstance(loader.sampler, DistributedSampler) else loader.batch_sampler.sampler


def _json(entry: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(entry))


def _two_rank_run(world_one_entry: dict[str, Any], rank: int) -> dict[str, Any]:
    """The uninterrupted run, then (same process group) a resume from ``world_one_entry``; and the same with
    StatefulDataLoaders, resumed from the entry rank 0 (the writer) gathered after 2 batches (every rank reads rank
    0's file)."""
    tracker = Tracker()
    loader = _loader(BATCH, 2, rank)
    tracker.track_train_loader(loader)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InexactResumeWarning)  # a plain loader saved inside an epoch
        epochs, saved = _train(tracker, loader, save_in=SAVED_EPOCH)
    stateful = Tracker()
    stateful_loader = _stateful_loader(BATCH, 2, rank)
    stateful.track_train_loader(stateful_loader)
    stateful_epochs, stateful_saved = _train(stateful, stateful_loader, save_in=SAVED_EPOCH)
    return {
        "epochs": epochs,
        "saved": saved,
        "from_world_one": _resume_two_ranks(world_one_entry, rank, _loader),
        "stateful": {
            "epochs": stateful_epochs,
            "saved": stateful_saved,
            "progress": stateful.state_dict()["progress"],
            "resumed": _resume_two_ranks(_rank_0s(stateful_saved[2]), rank, _stateful_loader),
        },
    }


def _rank_0s(entry: dict[str, Any]) -> dict[str, Any]:
    """Rank 0's ``entry`` on every rank: the file it wrote, read by each."""
    shared = [entry]
    dist.broadcast_object_list(shared, src=0)
    return shared[0]  # type: ignore[no-any-return]


def _resume_two_ranks(entry: dict[str, Any], rank: int, make: Callable[..., DataLoader[int]]) -> dict[str, Any]:
    tracker = Tracker()
    loader = make(BATCH, 2, rank)
    tracker.track_train_loader(loader)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", InexactResumeWarning)
        tracker.load_state_dict(entry)
    mapped = tracker.view.train
    counts = (mapped.batches.epoch.completed, mapped.samples.epoch)
    epochs, _ = _train(tracker, loader)
    return {
        "epochs": epochs,
        "progress": tracker.state_dict()["progress"],
        "mapping": tracker.view.resume_mapping,
        "mapped_counts": counts,
        "problems": [str(w.message) for w in caught if issubclass(w.category, InexactResumeWarning)],
        "world": dist.get_world_size(),
    }


@functools.cache
def _world_two() -> list[dict[str, Any]]:
    return run_on_two_ranks(functools.partial(_two_rank_run, _world_one_run(BATCH)[1][4]))


@functools.cache
def _world_one_run(batch: int, make: Callable[..., DataLoader[int]] = _loader) -> tuple[Epochs, Saved]:
    """The uninterrupted run at world size 1 on ``make``'s loader (a DistributedSampler's, or batch-sharded)."""
    tracker = Tracker()
    loader = make(batch, 1, 0)
    tracker.track_train_loader(loader)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InexactResumeWarning)  # a plain loader saved inside an epoch
        return _train(tracker, loader, save_in=SAVED_EPOCH)


def _world_one(batch: int) -> Epochs:
    return _world_one_run(batch)[0]


def _resume_at_world_one(
    entry: dict[str, Any], batch: int, make: Callable[..., DataLoader[int]] = _loader
) -> tuple[Tracker, Epochs, list[str]]:
    tracker = Tracker()
    loader = make(batch, 1, 0)
    tracker.track_train_loader(loader)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", InexactResumeWarning)
        tracker.load_state_dict(copy.deepcopy(entry))
    epochs, _ = _train(tracker, loader)
    return tracker, epochs, [str(w.message) for w in caught if issubclass(w.category, InexactResumeWarning)]


def _plain_mid_epoch(samples: int, resumed: int) -> str:
    """The problem (and warning) of a plain loader's counts mapped inside an epoch."""
    return (
        f"saved inside an epoch, after {samples} of its samples: a plain DataLoader has no position of its own, so "
        "the rest of the epoch is read by the framework's own rule (from a new iterator's first batch, with another "
        f"order), not from sample {samples}; its counts continue from batch {resumed}. Checkpoint between epochs to "
        "resume exactly at another world size"
    )


# --- same world size --------------------------------------------------------------------------


def test_the_gathered_entry_holds_every_ranks_entry_and_rank_0s_at_the_top() -> None:
    entry = _world_two()[0]["saved"][2]
    assert [len(entry["ranks"]), set(entry)] == [2, {"progress", "train_loaders", "rng", "ranks"}]
    assert {key: entry[key] for key in ("progress", "train_loaders", "rng")} == entry["ranks"][0]
    distributed = [rank["train_loaders"][0]["distributed"] for rank in entry["ranks"]]
    assert [(d["rank"], d["num_replicas"]) for d in distributed] == [(0, 2), (1, 2)]


def test_every_rank_of_a_stateful_dataloader_resumes_exactly_from_the_one_entry_rank_0_saved() -> None:
    full = [rank["stateful"] for rank in _world_two()]
    for k in (1, 2, 3, "end"):  # each rank's entry reached the writer only
        assert full[0]["saved"][k]["ranks"][1] == full[1]["saved"][k]
        assert "ranks" not in full[1]["saved"][k]
    resumed = [full[rank]["resumed"] for rank in (0, 1)]
    for rank in (0, 1):
        assert resumed[rank]["world"] == 2
        assert full[rank]["epochs"][SAVED_EPOCH][:2] + resumed[rank]["epochs"][0] == full[rank]["epochs"][SAVED_EPOCH]
        assert resumed[rank]["epochs"][1] == full[rank]["epochs"][SAVED_EPOCH + 1]
        assert without_ledger(resumed[rank]["progress"]) == without_ledger(full[rank]["progress"])
        assert resumed[rank]["mapping"] is None
        assert resumed[rank]["problems"] == []


# --- another world size -----------------------------------------------------------------------

# (batches trained per rank at world 2, new batch size): global position 3 * 2 * k, mapped to batch 6 * k // batch
MAPPED = [(1, 3), (2, 3), (3, 3), (1, 2), (3, 2), (1, 6), (2, 4), (1, 4)]


@pytest.mark.parametrize(("k", "batch"), MAPPED, ids=[f"k{k}-batch{b}" for k, b in MAPPED])
def test_world_2_to_1_mid_epoch_maps_the_counts_by_global_samples_and_reads_the_rest_from_the_epochs_start(
    k: int, batch: int
) -> None:
    entry = _world_two()[0]["saved"][k]
    reference = _world_one(batch)
    tracker, epochs, problems = _resume_at_world_one(entry, batch)
    resumed_at = k * BATCH * 2 // batch
    assert problems == [f"elastic resume: train dataloader 0: {_plain_mid_epoch(k * BATCH * 2, resumed_at)}"]
    per_epoch = len(reference[SAVED_EPOCH])
    assert epochs[0] == reference[SAVED_EPOCH][: per_epoch - resumed_at]  # the epoch's first batches again
    assert epochs[1] == reference[SAVED_EPOCH + 1]  # the next epoch is the new world's own
    assert tracker.view.train.batches.run.completed == 4 + per_epoch * (EPOCHS - SAVED_EPOCH)


def test_the_mapping_is_recorded_and_the_progress_is_rebased_to_the_new_batches() -> None:
    tracker = Tracker()
    loader = _loader(2, 1, 0)
    tracker.track_train_loader(loader)
    with pytest.warns(InexactResumeWarning, match="a plain DataLoader has no position of its own"):
        tracker.load_state_dict(_world_two()[0]["saved"][2])
    assert tracker.view.resume_mapping == {
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
                "problem": _plain_mid_epoch(12, 6),
            }
        ],
    }
    train = tracker.view.train
    assert (train.batches.epoch.completed, train.samples.epoch) == (6, 12)
    assert train.batches.run.completed == 4 + 6  # epoch 0 at world 2 (4 batches per rank), then the mapped 6
    assert train.dataloaders[0].batches.epoch == 6


def test_the_plain_loader_is_left_as_it_is_by_an_elastic_resume() -> None:
    tracker = Tracker()
    loader = _loader(2, 1, 0)
    tracker.track_train_loader(loader)
    with pytest.warns(InexactResumeWarning):
        tracker.load_state_dict(_world_two()[0]["saved"][2])
    assert "_get_iterator" not in vars(loader)
    assert len(list(loader)) == 11  # read whole: nothing of the saved epoch's position is installed


def test_a_checkpoint_between_epochs_after_an_elastic_resume_resumes_exactly_at_the_new_world_size() -> None:
    tracker = Tracker()
    loader = _loader(2, 1, 0)
    tracker.track_train_loader(loader)
    with pytest.warns(InexactResumeWarning):
        tracker.load_state_dict(_world_two()[0]["saved"][1])  # position 6: batch 3 of 11 at batches of 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InexactResumeWarning)  # saved inside the epoch, after every batch
        _epochs, saved = _train(tracker, loader, save_in=SAVED_EPOCH)
    again = Tracker()
    fresh_loader = _loader(2, 1, 0)
    again.track_train_loader(fresh_loader)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InexactResumeWarning)
        again.load_state_dict(saved["end"])
    epochs, _ = _train(again, fresh_loader)
    assert epochs == [_world_one(2)[SAVED_EPOCH + 1]]
    assert without_ledger(again.state_dict()["progress"]) == without_ledger(tracker.state_dict()["progress"])
    assert again.view.resume_mapping is None


def test_a_checkpoint_after_the_last_batch_of_an_epoch_resumes_with_nothing_left_of_it() -> None:
    entry = _world_two()[0]["saved"][4]  # the epoch is re-entered, its last (short) batch trained
    tracker = Tracker()
    loader = _loader(3, 1, 0)
    tracker.track_train_loader(loader)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InexactResumeWarning)
        tracker.load_state_dict(copy.deepcopy(entry))
    record = tracker.view.resume_mapping["train_loaders"][0]
    assert (record["samples_consumed"], record["exact"], record["problem"]) == (SAMPLES, True, "")
    assert (tracker.view.train.batches.epoch.completed, tracker.view.train.samples.epoch) == (8, SAMPLES)
    epochs, _ = _train(tracker, loader)
    assert epochs == [[], _world_one(3)[SAVED_EPOCH + 1]]


def test_a_stateful_dataloader_saved_after_the_last_batch_of_an_epoch_resumes_exactly_at_another_world_size() -> None:
    """Its epoch is finished: nothing of its own state (its rank's shard) is needed, as for a plain loader."""
    tracker = Tracker()
    loader = _stateful_loader(3, 1, 0)
    tracker.track_train_loader(loader)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InexactResumeWarning)
        tracker.load_state_dict(copy.deepcopy(_world_two()[0]["stateful"]["saved"][4]))
    record = tracker.view.resume_mapping["train_loaders"][0]
    assert (record["samples_consumed"], record["batches_consumed"], record["exact"]) == (SAMPLES, 8, True)
    assert (tracker.view.train.batches.epoch.completed, tracker.view.train.samples.epoch) == (8, SAMPLES)
    epochs, _ = _train(tracker, loader)
    assert epochs == [[], _world_one(3)[SAVED_EPOCH + 1]]


def test_a_checkpoint_between_epochs_needs_no_mapping_and_the_next_epoch_is_the_new_worlds() -> None:
    tracker, epochs, problems = _resume_at_world_one(_world_two()[0]["saved"]["end"], 3)
    assert problems == [] and tracker.view.resume_mapping["train_loaders"] == []
    assert epochs == [_world_one(3)[SAVED_EPOCH + 1]]


def test_world_1_to_2_mid_epoch_maps_the_counts_and_each_new_rank_reads_the_rest_from_the_epochs_start() -> None:
    full = _world_two()
    for rank in (0, 1):
        resumed = full[rank]["from_world_one"]  # saved at world 1 after 4 batches of 3: global position 12
        assert resumed["mapping"]["train_loaders"][0]["batches_consumed"] == 2  # 12 = 2 batches x 3 x 2 ranks
        assert resumed["mapped_counts"] == (2, 6)
        assert resumed["problems"] == [f"elastic resume: train dataloader 0: {_plain_mid_epoch(12, 2)}"]
        assert resumed["epochs"][0] == full[rank]["epochs"][SAVED_EPOCH][:2]  # 4 batches an epoch per rank
        assert resumed["epochs"][1] == full[rank]["epochs"][SAVED_EPOCH + 1]


def _saved_by_distributed_sampler() -> dict[str, Any]:
    return _world_two()[0]["saved"][2]


def _saved_batch_sharded() -> dict[str, Any]:
    return _sharded_world_two()[0]["saved"][2]


def _saved_by_stateful_loader() -> dict[str, Any]:
    return _world_two()[0]["stateful"]["saved"][2]


ERRORS = [  # (id, saved entry, loader at world size 1, key named)
    (
        "no-distributed-sampler",
        _saved_by_distributed_sampler,
        lambda: DataLoader(Ids(SAMPLES), batch_size=3, shuffle=True),
        "train_loaders.0",
    ),
    (
        "other-seed",
        _saved_by_distributed_sampler,
        lambda: _loader(3, 1, 0, seed=8),
        "ranks.0.train_loaders.0.distributed.seed",
    ),
    ("sampler-of-another-world", _saved_by_distributed_sampler, lambda: _loader(3, 2, 0), "train_loaders.0"),
    (
        "sharded-onto-distributed-sampler",
        _saved_batch_sharded,
        lambda: _loader(3, 1, 0),
        "ranks.0.train_loaders.0.distributed",
    ),
    (
        "sharded-onto-not-seedable",
        _saved_batch_sharded,
        lambda: DataLoader(Ids(SAMPLES), batch_size=3, shuffle=True),
        "train_loaders.0",
    ),
    (
        "sharded-other-seed",
        _saved_batch_sharded,
        lambda: _sharded_loader(3, 1, 0, seed=8),
        "ranks.0.train_loaders.0.distributed.seed",
    ),
    (  # its own state holds its rank's shard of the epoch
        "stateful-loader-mid-epoch",
        _saved_by_stateful_loader,
        lambda: _stateful_loader(3, 1, 0),
        "ranks.0.train_loaders.0.kind",
    ),
]


@pytest.mark.parametrize(("saved", "build", "key"), [pytest.param(e, b, k, id=i) for i, e, b, k in ERRORS])
def test_an_unmappable_loader_raises_naming_the_key_and_nothing_is_loaded(saved: Any, build: Any, key: str) -> None:
    tracker = Tracker()
    loader = build()
    tracker.track_train_loader(loader)
    before = tracker.state_dict()
    with pytest.raises(ProgressStateError) as caught:
        tracker.load_state_dict(saved())
    assert caught.value.key == key
    assert tracker.state_dict()["progress"] == before["progress"]


def test_loading_for_evaluation_at_another_world_size_takes_the_saved_ranks_progress_as_it_is() -> None:
    entry = copy.deepcopy(_world_two()[0]["saved"][2])
    tracker = Tracker()  # no train loader: nothing will train
    tracker.load_for_evaluation(entry)
    assert tracker.progress.state_dict() == entry["ranks"][0]["progress"]
    assert tracker.view.resume_mapping is None


def test_loading_for_evaluation_names_a_bad_key_under_the_saved_rank_and_changes_nothing() -> None:
    entry = copy.deepcopy(_world_two()[0]["saved"][2])
    entry["ranks"][0]["progress"]["stages"]["train"]["samples"]["run"] = -1
    tracker = Tracker()
    before = tracker.progress.state_dict()
    with pytest.raises(ProgressStateError) as caught:
        tracker.load_for_evaluation(entry)
    assert caught.value.key == "ranks.0.progress.stages.train.samples.run"
    assert tracker.progress.state_dict() == before


def test_a_bad_part_of_a_gathered_entry_is_named_under_its_rank() -> None:
    entry = copy.deepcopy(_world_one_run(BATCH)[1][2])
    entry["ranks"][0]["progress"]["stages"]["train"]["samples"]["run"] = -1
    tracker = Tracker()
    loader = _loader(BATCH, 1, 0)
    tracker.track_train_loader(loader)
    with pytest.raises(ProgressStateError) as caught:
        tracker.load_state_dict(entry)
    assert caught.value.key == "ranks.0.progress.stages.train.samples.run"


def test_an_elastic_resume_needs_the_loader_tracked_before_the_load() -> None:
    with pytest.raises(ProgressStateError, match="track_train_loader before load_state_dict") as caught:
        Tracker().load_state_dict(_world_two()[0]["saved"][2])
    assert caught.value.key == "train_loaders.0"


# --- batch-sharded loaders (Accelerate's geometry, tracker_core/distributed/_sharded.py) ----------
# A seedable sampler's one order per epoch, cut into batches of b; rank r of W takes batches r, r + W, ...
# (22 samples, batches of 3 at world 2: 8 batches, the last of 1 sample, so the last round is padded
# from the epoch's start: 4 batches of 3 per rank).


def _sharded_loader(batch: int, world: int, rank: int, seed: int = SEED) -> DataLoader[int]:
    """Wired as Accelerate's prepare wires it: the shard also holds the seedable sampler (``set_sampler``),
    whose generator exists before its first epoch (the Accelerate adapter creates it; it is reseeded anyway)."""
    pytest.importorskip("accelerate")
    from accelerate.data_loader import BatchSamplerShard, SeedableRandomSampler

    dataset = Ids(SAMPLES)
    sampler = SeedableRandomSampler(dataset, data_seed=seed, generator=torch.Generator())
    batches: Any = BatchSampler(sampler, batch, drop_last=False)
    if world > 1:
        batches = BatchSamplerShard(batches, num_processes=world, process_index=rank)
        batches.sampler = sampler
    return DataLoader(dataset, batch_sampler=batches)


def _sharded_two_rank_run(world_one_entry: dict[str, Any], rank: int) -> dict[str, Any]:
    """The uninterrupted run at world 2, and a resume from ``world_one_entry`` (saved at world 1)."""
    tracker = Tracker()
    loader = _sharded_loader(BATCH, 2, rank)
    tracker.track_train_loader(loader)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InexactResumeWarning)  # a plain loader saved inside an epoch
        epochs, saved = _train(tracker, loader, save_in=SAVED_EPOCH)
    resumed = Tracker()
    fresh_loader = _sharded_loader(BATCH, 2, rank)
    resumed.track_train_loader(fresh_loader)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", InexactResumeWarning)
        resumed.load_state_dict(world_one_entry)
    mapped = resumed.view.train
    mapped_counts = (mapped.batches.epoch.completed, mapped.samples.epoch)
    resumed_epochs, _ = _train(resumed, fresh_loader)
    return {
        "epochs": epochs,
        "saved": saved,
        "from_world_one": resumed_epochs,
        "mapping": resumed.view.resume_mapping,
        "mapped_counts": mapped_counts,
        "problems": [str(w.message) for w in caught if issubclass(w.category, InexactResumeWarning)],
    }


@functools.cache
def _sharded_world_two() -> list[dict[str, Any]]:
    return run_on_two_ranks(functools.partial(_sharded_two_rank_run, _world_one_run(BATCH, _sharded_loader)[1][4]))


def test_a_batch_sharded_loader_saves_its_sharding() -> None:
    distributed = [rank["train_loaders"][0]["distributed"] for rank in _sharded_world_two()[0]["saved"][2]["ranks"]]
    assert distributed == [
        {
            "num_replicas": 2,
            "rank": rank,
            "seed": SEED,
            "shuffle": True,
            "drop_last": False,
            "dataset_size": SAMPLES,
            "batch_size": BATCH,
            "shards": "batches",
            "even_batches": True,
        }
        for rank in (0, 1)
    ]


@pytest.mark.parametrize(("k", "batch"), MAPPED, ids=[f"k{k}-batch{b}" for k, b in MAPPED])
def test_batch_sharded_world_2_to_1_mid_epoch_maps_the_counts_and_reads_the_rest_from_the_epochs_start(
    k: int, batch: int
) -> None:
    _, epochs, problems = _resume_at_world_one(_sharded_world_two()[0]["saved"][k], batch, _sharded_loader)
    reference = _world_one_run(batch, _sharded_loader)[0]
    resumed_at = k * BATCH * 2 // batch
    assert problems == [f"elastic resume: train dataloader 0: {_plain_mid_epoch(k * BATCH * 2, resumed_at)}"]
    assert epochs[0] == reference[SAVED_EPOCH][: len(reference[SAVED_EPOCH]) - resumed_at]
    assert epochs[1] == reference[SAVED_EPOCH + 1]


def test_batch_sharded_progress_is_rebased_to_the_new_batches() -> None:
    tracker = Tracker()
    loader = _sharded_loader(2, 1, 0)
    tracker.track_train_loader(loader)
    with pytest.warns(InexactResumeWarning, match="a plain DataLoader has no position of its own"):
        tracker.load_state_dict(copy.deepcopy(_sharded_world_two()[0]["saved"][2]))
    assert tracker.view.resume_mapping["train_loaders"] == [
        {
            "index": 0,
            "samples_consumed": 12,
            "batch_size": 2,
            "batches_consumed": 6,
            "exact": False,
            "problem": _plain_mid_epoch(12, 6),
        }
    ]
    assert (tracker.view.train.batches.epoch.completed, tracker.view.train.samples.epoch) == (6, 12)


def test_batch_sharded_epoch_ended_in_a_padded_round_resumes_with_nothing_left_of_it() -> None:
    tracker = Tracker()
    loader = _sharded_loader(5, 1, 0)
    tracker.track_train_loader(loader)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InexactResumeWarning)
        tracker.load_state_dict(copy.deepcopy(_sharded_world_two()[0]["saved"][4]))  # 24 positions read, 2 padded
    assert tracker.view.resume_mapping["train_loaders"][0]["samples_consumed"] == SAMPLES
    assert (tracker.view.train.batches.epoch.completed, tracker.view.train.samples.epoch) == (5, SAMPLES)
    epochs, _ = _train(tracker, loader)
    assert epochs == [[], _world_one_run(5, _sharded_loader)[0][SAVED_EPOCH + 1]]


def test_batch_sharded_world_1_to_2_mid_epoch_maps_the_counts_and_each_new_rank_reads_the_rest_from_the_start() -> None:
    full = _sharded_world_two()
    for rank in (0, 1):  # saved at world 1 after 4 batches of 3: global position 12 = 2 batches x 3 x 2 ranks
        assert full[rank]["mapping"]["train_loaders"][0]["batches_consumed"] == 2
        assert full[rank]["mapped_counts"] == (2, 6)
        assert full[rank]["problems"] == [f"elastic resume: train dataloader 0: {_plain_mid_epoch(12, 2)}"]
        assert full[rank]["from_world_one"][0] == full[rank]["epochs"][SAVED_EPOCH][:2]  # 4 batches an epoch per rank
        assert full[rank]["from_world_one"][1] == full[rank]["epochs"][SAVED_EPOCH + 1]
