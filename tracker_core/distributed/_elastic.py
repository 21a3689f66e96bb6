"""The entry a rank loads, at any world size, from a checkpoint holding every rank's entry (docs/distributed.md,
"Elastic resume by samples": another world size maps each train loader's counts by global samples)."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from tracker_core._errors import ProgressStateError
from tracker_core.counting._counts import PhaseCounts
from tracker_core.data._position import LoaderPosition
from tracker_core.data._samplers import read_distributed
from tracker_core.distributed._rank_files import RankFiles, is_index
from tracker_core.distributed._sharded import is_batch_sharded, samples_read
from tracker_core.state._codec import check_plain
from tracker_core.state._readers import keys_under, read_int, read_list, read_mapping
from tracker_core.state._schema import parse
from tracker_core.vocabulary import Phase, Scope

ENTRY_KEYS = ("progress", "train_loaders", "rng")


@dataclass(frozen=True)
class Selected:
    """The entry this rank loads, how it was mapped (None at the saved world size), and what is inexact."""

    entry: dict[str, Any]
    mapping: dict[str, Any] | None
    problems: list[str]
    key_prefix: str  # where ``entry`` (mapped: the rank it was built from) sits in the saved entry ("ranks.1")


def world() -> tuple[int, int]:
    """``(world size, rank)`` of the default process group; ``(1, 0)`` without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_world_size(), dist.get_rank()
    return 1, 0


def saved_elsewhere(entry: object) -> bool:
    """True if ``entry`` holds every rank's part (``"ranks"``: the entries, their files, or the index of
    those files) and was saved by another number of processes."""
    ranks = entry.get("ranks") if isinstance(entry, dict) else None
    if is_index(ranks):
        size = ranks.get("world_size")
        return type(size) is int and size != world()[0]
    return isinstance(ranks, (list, RankFiles)) and bool(ranks) and len(ranks) != world()[0]


def reenters_train_epoch(epochs: PhaseCounts) -> bool:
    """True if a train epoch has begun and not processed all its batches: a load re-enters it."""
    return epochs.ready != epochs.completed and epochs.processed == epochs.completed


def select(ranks: object, loaders: Mapping[int, LoaderPosition]) -> Selected:
    """This rank's entry from the saved ``ranks`` (a list, or :class:`RankFiles`), validated as far as it is read:
    at the saved world size this rank's entry; at another, the source rank's, its loader counts mapped."""
    if is_index(ranks):
        raise ProgressStateError(
            "ranks",
            f"the ranks' entries are in files beside the checkpoint ({ranks['rank_files']!r}, relative to its "
            "folder): load it through the adapter, or pass the entry through "
            "tracker_core.adapter.with_rank_files(entry, checkpoint_path) first",
        )
    if not isinstance(ranks, (list, RankFiles)) or not ranks:
        raise ProgressStateError("ranks", "expected a non-empty list of entries, one per rank")
    size, rank = world()
    saved_size = len(ranks)
    source_rank = rank if saved_size == size else rank % saved_size
    key = f"ranks.{source_rank}"
    check_plain(ranks[source_rank], key)
    source = read_mapping(ranks[source_rank], key, required=ENTRY_KEYS)
    if saved_size == size:
        return Selected(ranks[rank], None, [], key)
    states = read_list(source["train_loaders"], f"{key}.train_loaders")
    with keys_under(f"{key}.progress"):
        epochs = parse(source["progress"]).train_epochs
    mapping: dict[str, Any] = {
        "saved_world_size": saved_size,
        "world_size": size,
        "rank": rank,
        "source_rank": source_rank,
        "train_loaders": [],
    }
    progress = copy.deepcopy(source["progress"])
    # Only generators are restored: the next epoch is the new geometry's own; inside an epoch only counts are mapped.
    entry = {"progress": progress, "train_loaders": [_unsharded(state) for state in states], "rng": source["rng"]}
    problems: list[str] = []
    if not reenters_train_epoch(epochs):
        return Selected(entry, mapping, problems, key)
    if progress["stages"]["train"]["accumulating_batches"]:
        problems.append(
            "saved inside a gradient accumulation window: its partial gradients belong to the old world size"
        )
    for index, state in enumerate(states):
        if isinstance(state, dict) and state.get("kind") == "untracked":
            continue
        record = _map_loader(state, index, loaders.get(index), saved_size, f"{key}.train_loaders.{index}", progress)
        # Nothing of the saved position is loaded (a StatefulDataLoader's own state included).
        entry["train_loaders"][index] = {**entry["train_loaders"][index], "batches_consumed": 0, "epoch": None}
        mapping["train_loaders"].append(record)
        if record["problem"]:
            problems.append(f"train dataloader {index}: {record['problem']}")
    return Selected(entry, mapping, problems, key)


def _unsharded(state: object) -> object:
    """A loader state freed of its old geometry (epoch length, sampler rank)."""
    if not isinstance(state, dict) or state.get("kind") == "untracked":
        return state
    return {**state, "batches_per_epoch": None, "distributed": None}


def _map_loader(
    state: object, index: int, position: LoaderPosition | None, saved_size: int, key: str, progress: dict[str, Any]
) -> dict[str, Any]:
    """The record of train loader ``index``'s counts, saved inside an epoch in ``state`` (at ``key``), mapped by global
    samples to this world size and re-based in ``progress``. The loader is not positioned: the framework reads the
    rest of the epoch by its own rule (its position warning is left out: the record's problem says it)."""
    size = world()[0]
    if not isinstance(state, dict):
        raise ProgressStateError(key, "expected a dict")
    if position is None:
        raise ProgressStateError(
            f"train_loaders.{index}",
            f"an elastic resume (saved at world size {saved_size}, loading at {size}) maps the data position "
            "onto the loader: register it with track_train_loader before load_state_dict",
        )
    finished = state.get("batches_consumed") == state.get("batches_per_epoch")
    mine, saved = _geometries(state, index, position, saved_size, key, finished)
    consumed = read_int(state.get("batches_consumed"), f"{key}.batches_consumed", minimum=0)
    batches_per_epoch = position._batches_per_epoch()  # known: a sharded loader is map-style
    # A finished epoch may end in a short batch: it consumed every position, whatever k * b says.
    samples = mine["dataset_size"] if finished else consumed * saved["batch_size"] * saved_size
    resumed = (
        batches_per_epoch if finished and batches_per_epoch is not None else samples // (mine["batch_size"] * size)
    )
    problem = (
        ""
        if finished
        else f"saved inside an epoch, after {samples} of its samples: a plain DataLoader has no position of its own, "
        f"so the rest of the epoch is read by the framework's own rule (from a new iterator's first batch, with "
        f"another order), not from sample {samples}; its counts continue from batch {resumed}. Checkpoint between "
        "epochs to resume exactly at another world size"
    )
    _rebase(progress, index, resumed - consumed, _samples_read(mine, resumed))
    return {
        "index": index,
        "samples_consumed": samples,
        "batch_size": mine["batch_size"],
        "batches_consumed": resumed,
        "exact": not problem,
        "problem": problem,
    }


def _geometries(
    state: Mapping[str, Any], index: int, position: LoaderPosition, saved_size: int, key: str, finished: bool
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The sharding of train loader ``index`` (at ``position``) and the one ``state`` (at ``key``) was saved with,
    checked: they shard and order an epoch alike, and the state is not a loader's own inside its epoch (one
    ``finished``, every batch consumed, needs nothing of it)."""
    size = world()[0]
    if state.get("kind") == "own_state" and not finished:
        raise ProgressStateError(
            f"{key}.kind",
            f"a loader's own state (torchdata's StatefulDataLoader) holds its rank's shard of the epoch, saved at "
            f"world size {saved_size}: it cannot be mapped to world size {size}; resume at world size {saved_size}, "
            "or from a checkpoint between epochs",
        )
    mine = position.distributed_info()
    if mine is None or mine["batch_size"] is None:
        raise ProgressStateError(
            f"train_loaders.{index}",
            "an elastic resume maps positions only for a loader with a DistributedSampler and a batch_size, "
            "or one sharded by batches over a seedable sampler (Accelerate's use_seedable_sampler=True)",
        )
    if mine["num_replicas"] != size:
        raise ProgressStateError(
            f"train_loaders.{index}",
            f"this loader is sharded for num_replicas={mine['num_replicas']}; the world size is {size}",
        )
    saved = read_distributed(state.get("distributed"), f"{key}.distributed")
    if saved is None or saved["batch_size"] is None:
        raise ProgressStateError(
            f"{key}.distributed",
            "saved without a DistributedSampler and a batch_size, or batch sharding over a seedable sampler: "
            "its position cannot be mapped",
        )
    _check_same_order(saved, mine, f"{key}.distributed")
    return mine, saved


def _check_same_order(saved: Mapping[str, Any], mine: Mapping[str, Any], key: str) -> None:
    """The sharding ``saved`` (at ``key``) and this loader's shard and order an epoch alike."""
    if is_batch_sharded(saved) != is_batch_sharded(mine):
        raise ProgressStateError(key, f"saved {_sharding(saved)}; this loader has {_sharding(mine)}")
    for name in ("seed", "shuffle", "dataset_size"):
        if saved[name] != mine[name]:
            raise ProgressStateError(
                f"{key}.{name}", f"saved with {name}={saved[name]!r}; this loader has {name}={mine[name]!r}"
            )


def _sharding(info: Mapping[str, Any]) -> str:
    return "sharding by batches" if is_batch_sharded(info) else "a DistributedSampler"


def _samples_read(info: Mapping[str, Any], batches: int) -> int:
    """This rank's samples of the epoch after its first ``batches`` batches; with a DistributedSampler at most its
    ``len()``: torch pads the data to a multiple of the world size, or drops the tail."""
    if is_batch_sharded(info):
        return samples_read(info, batches)
    size: int = info["dataset_size"]
    replicas: int = info["num_replicas"]
    per_rank = size // replicas if info["drop_last"] else math.ceil(size / replicas)
    return min(batches * int(info["batch_size"]), per_rank)


def _rebase(progress: dict[str, Any], index: int, delta_batches: int, samples: int) -> None:
    """Move the re-entered epoch's counts of loader ``index`` by ``delta_batches``, to ``samples`` in the epoch."""
    train = progress["stages"]["train"]
    if index >= len(train["dataloaders"]):
        return  # this loader processed nothing yet: the mapped position is 0 as well
    loader = train["dataloaders"][index]
    delta_samples = samples - loader["samples"]["epoch"]
    for scope in Scope:
        loader["batches"][scope] += delta_batches
        loader["samples"][scope] += delta_samples
        train["samples"][scope] += delta_samples
        for phase in Phase:
            train["batches"][scope][phase] += delta_batches
