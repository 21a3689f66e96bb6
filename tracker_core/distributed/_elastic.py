"""The entry a rank loads, at any world size, from a checkpoint holding every rank's entry (docs/distributed.md,
"Elastic resume by samples": another world size maps each train loader's position by global samples)."""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist

from tracker_core._errors import ProgressStateError
from tracker_core.counting._counts import PhaseCounts
from tracker_core.data._position import LoaderPosition
from tracker_core.data._samplers import read_distributed
from tracker_core.distributed._loader_summary import check_same_order, read_summary, summarize_loader
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
    at the saved world size this rank's entry; at another, the source rank's and every rank's loader positions."""
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
    if saved_size == size:
        check_plain(ranks[rank], f"ranks.{rank}")
        read_mapping(ranks[rank], f"ranks.{rank}", required=ENTRY_KEYS)
        return Selected(ranks[rank], None, [], f"ranks.{rank}")
    source_rank = rank % saved_size
    summaries = ranks.loader_summaries if isinstance(ranks, RankFiles) else None
    _read_for_mapping(ranks, summaries, source_rank)
    source = ranks[source_rank]
    with keys_under(f"ranks.{source_rank}.progress"):
        epochs = parse(source["progress"]).train_epochs
    mapping: dict[str, Any] = {
        "saved_world_size": saved_size,
        "world_size": size,
        "rank": rank,
        "source_rank": source_rank,
        "train_loaders": [],
    }
    entry = {
        "progress": copy.deepcopy(source["progress"]),
        "train_loaders": list(source["train_loaders"]),
        "rng": source["rng"],
    }
    if reenters_train_epoch(epochs):
        problems = _map_loaders(ranks, summaries, loaders, source_rank, entry, mapping)
    else:  # between epochs only generators are restored; the next epoch is the new geometry's own
        entry["train_loaders"] = [_between_epochs(state) for state in entry["train_loaders"]]
        problems = []
    return Selected(entry, mapping, problems, f"ranks.{source_rank}")


def _read_for_mapping(ranks: Sequence[Any], summaries: Sequence[object] | None, source_rank: int) -> None:
    """Check what a mapping reads: the source rank's entry, and every rank's train loaders unless the writer
    summarised them (``summaries``: rank files, of which only the source rank's is read)."""
    check_plain(ranks[source_rank], f"ranks.{source_rank}")
    for index in range(len(ranks)) if summaries is None else (source_rank,):
        read_mapping(ranks[index], f"ranks.{index}", required=ENTRY_KEYS)
        check_plain(ranks[index]["train_loaders"], f"ranks.{index}.train_loaders")
        read_list(ranks[index]["train_loaders"], f"ranks.{index}.train_loaders")


def _map_loaders(
    ranks: Sequence[Mapping[str, Any]],
    summaries: Sequence[object] | None,
    loaders: Mapping[int, LoaderPosition],
    source_rank: int,
    entry: dict[str, Any],
    mapping: dict[str, Any],
) -> list[str]:
    """Map each tracked train loader of ``entry`` (and its counts) to this world size, record it in ``mapping``;
    return what is inexact."""
    problems: list[str] = []
    if entry["progress"]["stages"]["train"]["accumulating_batches"]:
        problems.append(
            "saved inside a gradient accumulation window: its partial gradients belong to the old world size"
        )
    for index, state in enumerate(ranks[source_rank]["train_loaders"]):
        if isinstance(state, dict) and state.get("kind") == "untracked":
            continue
        position = loaders.get(index)
        state, record = _map_loader(ranks, summaries, index, position, mapping["world_size"], source_rank, entry)
        entry["train_loaders"][index] = state
        mapping["train_loaders"].append(record)
        if record["problem"]:
            problems.append(f"train dataloader {index}: {record['problem']}")
    return problems


def _between_epochs(state: object) -> object:
    """A loader state saved between epochs, freed of its old geometry (epoch length, sampler rank)."""
    if not isinstance(state, dict) or state.get("kind") == "untracked":
        return state
    return {**state, "batches_per_epoch": None, "distributed": None}


def _map_loader(
    ranks: Sequence[Mapping[str, Any]],
    summaries: Sequence[object] | None,
    index: int,
    position: LoaderPosition | None,
    size: int,
    source_rank: int,
    entry: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train loader ``index``'s state mapped to this world size and its record; re-bases its counts in ``entry``."""
    saved_size = len(ranks)
    key = f"train_loaders.{index}"
    if position is None:
        raise ProgressStateError(
            key,
            f"an elastic resume (saved at world size {saved_size}, loading at {size}) maps the data position "
            "onto the loader: register it with track_train_loader before load_state_dict",
        )
    mine = position.distributed_info()
    if mine is None or mine["batch_size"] is None:
        raise ProgressStateError(
            key,
            "an elastic resume maps positions only for a loader with a DistributedSampler and a batch_size, "
            "or one sharded by batches over a seedable sampler (Accelerate's use_seedable_sampler=True)",
        )
    if mine["num_replicas"] != size:
        raise ProgressStateError(
            key, f"this loader is sharded for num_replicas={mine['num_replicas']}; the world size is {size}"
        )
    summary = _checked_summary(ranks, summaries, index, mine)
    source_state = ranks[source_rank]["train_loaders"][index]
    source_key = f"ranks.{source_rank}.{key}"
    if not isinstance(source_state, dict):
        raise ProgressStateError(source_key, "missing: every rank must save the same train loaders")
    source_consumed = read_int(source_state.get("batches_consumed"), f"{source_key}.batches_consumed", minimum=0)
    batch_size, batches, finished = summary["batch_size"], summary["consumed_min"], summary["finished"]
    new_batch = mine["batch_size"]
    global_batch = new_batch * size
    # A finished epoch may end in a short batch: it consumed every position, whatever k * b says.
    samples = mine["dataset_size"] if finished else batches * batch_size * saved_size
    batches_per_epoch = position._batches_per_epoch()  # known: a sharded loader is map-style
    resumed = batches_per_epoch if finished and batches_per_epoch is not None else samples // global_batch
    problems = _uneven_ranks(summary, saved_size)
    if not finished and samples != resumed * global_batch:
        problems.append(
            f"global sample position {samples} is not a multiple of the new global batch {new_batch} x {size} = "
            f"{global_batch}: resumed at batch {resumed} (position {resumed * global_batch}), so the "
            f"{samples - resumed * global_batch} samples before position {samples} are trained again"
        )
    state = dict(source_state, batches_consumed=resumed, batches_per_epoch=batches_per_epoch, distributed=mine)
    record = {
        "index": index,
        "samples_consumed": samples,
        "batch_size": new_batch,
        "batches_consumed": resumed,
        "exact": not problems,
        "problem": "; ".join(problems),
    }
    _rebase(entry["progress"], index, resumed - source_consumed, _samples_read(mine, resumed))
    return state, record


def _checked_summary(
    ranks: Sequence[Mapping[str, Any]], summaries: Sequence[object] | None, index: int, mine: Mapping[str, Any]
) -> dict[str, Any]:
    """The saved ranks' summary of train loader ``index`` (the writer's, or made here), checked against ``mine``."""
    first_key = f"ranks.0.train_loaders.{index}.distributed"
    if summaries is not None:
        summary = read_summary(summaries, index, len(ranks))
        check_same_order(summary["distributed"], mine, first_key, "this loader has")
        return summary
    # Every rank's entry at hand (their train loaders read as lists): rank 0's against this loader first, then the
    # ranks' agreement; a state summarize_loader refuses is left to it, which names it.
    first = ranks[0]["train_loaders"]
    if index < len(first) and isinstance(first[index], Mapping):
        saved = read_distributed(first[index].get("distributed"), first_key)
        if saved is not None:
            check_same_order(saved, mine, first_key, "this loader has")
    return summarize_loader(ranks, index)


def _uneven_ranks(summary: Mapping[str, Any], saved_size: int) -> list[str]:
    """The problem of ranks saved at different batch counts, if they were."""
    batches = summary["consumed_min"]
    if summary["consumed_max"] == batches:
        return []
    listed = summary["consumed"]
    by_rank = (
        ", ".join(f"rank {r} = {k}" for r, k in enumerate(listed))
        if listed is not None
        else f"from {batches} to {summary['consumed_max']} over {saved_size} ranks"
    )
    return [
        f"ranks saved at different batch counts ({by_rank}); resumed from the smallest, so the "
        f"{summary['ahead'] * summary['batch_size']} samples the ranks ahead had trained are trained again"
    ]


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
