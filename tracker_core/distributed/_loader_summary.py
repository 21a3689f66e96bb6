"""What an elastic resume needs of every saved rank's train loader, reduced by the writer to a summary of constant size."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tracker_core._errors import ProgressStateError
from tracker_core.data._samplers import read_distributed
from tracker_core.distributed._sharded import is_batch_sharded
from tracker_core.state._readers import read_int, read_list, read_mapping

SUMMARY_KEYS = ("distributed", "batch_size", "consumed_min", "consumed_max", "ahead", "finished", "consumed")
_LISTED = 16  # a summary lists each rank's batch count up to this many ranks (for the warning)


def summarize_loaders(ranks: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per train loader of the saved ``ranks``: what an elastic resume needs of all of them (:func:`summarize_loader`),
    or ``{"error": {"key", "problem"}}`` where they cannot be mapped; never raises (the writer calls it at a save)."""
    found: list[dict[str, Any]] = []
    count = max((len(e.get("train_loaders") or ()) for e in ranks if isinstance(e, Mapping)), default=0)
    for index in range(count):
        try:
            found.append(summarize_loader(ranks, index))
        except ProgressStateError as error:
            found.append({"error": {"key": error.key, "problem": error.problem}})
        except Exception as error:  # a malformed entry: the load names it
            found.append({"error": {"key": f"train_loaders.{index}", "problem": f"{type(error).__name__}: {error}"}})
    return found


def summarize_loader(ranks: Sequence[Mapping[str, Any]], index: int) -> dict[str, Any]:
    """Every saved rank's train loader ``index`` checked against rank 0's, reduced to what the mapping reads
    (``SUMMARY_KEYS``; docs/distributed.md, "Rank files"); ``ProgressStateError`` names the key."""
    consumed: list[int] = []
    first: dict[str, Any] | None = None
    finished = True
    for rank, entry in enumerate(ranks):
        key = f"ranks.{rank}.train_loaders.{index}"
        states = entry["train_loaders"]
        if not isinstance(states, list) or index >= len(states) or not isinstance(states[index], dict):
            raise ProgressStateError(key, "missing: every rank must save the same train loaders")
        state = states[index]
        saved = read_distributed(state.get("distributed"), f"{key}.distributed")
        if saved is None or saved["batch_size"] is None:
            raise ProgressStateError(
                f"{key}.distributed",
                "saved without a DistributedSampler and a batch_size, or batch sharding over a seedable sampler: "
                "its position cannot be mapped",
            )
        first = saved if first is None else first
        check_same_order(saved, first, f"{key}.distributed", "rank 0 saved")
        if is_batch_sharded(saved) and state.get("kind") == "own_state":
            raise ProgressStateError(
                f"{key}.kind", "a batch-sharded loader's own state holds its rank's shard: it cannot be mapped"
            )
        if (saved["num_replicas"], saved["rank"]) != (len(ranks), rank):
            raise ProgressStateError(
                f"{key}.distributed.rank",
                f"saved by rank {saved['rank']} of {saved['num_replicas']}, listed as rank {rank} of {len(ranks)}",
            )
        if saved["batch_size"] != first["batch_size"]:
            raise ProgressStateError(f"{key}.distributed.batch_size", "ranks saved different batch sizes")
        consumed.append(read_int(state.get("batches_consumed"), f"{key}.batches_consumed", minimum=0))
        finished = finished and consumed[-1] == state.get("batches_per_epoch")
    assert first is not None  # ranks is not empty
    return {
        "distributed": first,
        "batch_size": first["batch_size"],
        "consumed_min": min(consumed),
        "consumed_max": max(consumed),
        "ahead": sum(consumed) - min(consumed) * len(consumed),
        "finished": finished,
        "consumed": consumed if len(ranks) <= _LISTED else None,
    }


def read_summary(summaries: Sequence[object], index: int, saved_size: int) -> dict[str, Any]:
    """The writer's summary of train loader ``index`` (``ranks.loaders.<index>`` of the index), checked."""
    key = f"ranks.loaders.{index}"
    if index >= len(summaries):
        raise ProgressStateError(key, "missing: the writer summarised fewer train loaders")
    summary = summaries[index]
    if isinstance(summary, Mapping) and set(summary) == {"error"}:
        error = read_mapping(summary["error"], f"{key}.error", required=("key", "problem"))
        raise ProgressStateError(str(error["key"]), str(error["problem"]))
    fields = read_mapping(summary, key, required=SUMMARY_KEYS)
    first = read_distributed(fields["distributed"], f"{key}.distributed")
    if first is None or first["batch_size"] is None or first["num_replicas"] != saved_size:
        raise ProgressStateError(f"{key}.distributed", f"expected rank 0's sharding of {saved_size} ranks")
    low = read_int(fields["consumed_min"], f"{key}.consumed_min", minimum=0)
    high = read_int(fields["consumed_max"], f"{key}.consumed_max", minimum=low)
    listed = fields["consumed"]
    if listed is not None:
        listed = [
            read_int(k, f"{key}.consumed.{r}", minimum=low, maximum=high)
            for r, k in enumerate(read_list(listed, f"{key}.consumed"))
        ]
        if len(listed) != saved_size:
            raise ProgressStateError(f"{key}.consumed", f"expected {saved_size} batch counts")
    if not isinstance(fields["finished"], bool):
        raise ProgressStateError(f"{key}.finished", "expected a bool")
    return {
        "distributed": first,
        "batch_size": read_int(fields["batch_size"], f"{key}.batch_size", minimum=1),
        "consumed_min": low,
        "consumed_max": high,
        "ahead": read_int(fields["ahead"], f"{key}.ahead", minimum=0, maximum=(high - low) * saved_size),
        "finished": fields["finished"],
        "consumed": listed,
    }


def check_same_order(saved: Mapping[str, Any], other: Mapping[str, Any], key: str, other_name: str) -> None:
    """The sharding ``saved`` (at ``key``) and ``other`` (``other_name``: "rank 0 saved", "this loader has") shard
    and order an epoch alike."""
    if is_batch_sharded(saved) != is_batch_sharded(other):
        raise ProgressStateError(key, f"saved {_sharding(saved)}; {other_name} {_sharding(other)}")
    for name in ("seed", "shuffle", "dataset_size"):
        if saved[name] != other[name]:
            raise ProgressStateError(
                f"{key}.{name}", f"saved with {name}={saved[name]!r}; {other_name} {name}={other[name]!r}"
            )


def _sharding(info: Mapping[str, Any]) -> str:
    return "sharding by batches" if is_batch_sharded(info) else "a DistributedSampler"
