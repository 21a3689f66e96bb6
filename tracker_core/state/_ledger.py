"""The saved form of the run ledger (``ledger``, docs/schema.md): its words, limits and validation; the live
ledger is ``counting/_ledger.py``."""

from __future__ import annotations

from typing import Any

from tracker_core._errors import ProgressStateError
from tracker_core.state._form import Part
from tracker_core.state._readers import join_key, read_counts, read_int, read_list, read_mapping, read_str, shown
from tracker_core.vocabulary import RunKind

MAX_LEDGER_RUNS = 100  # the most recent runs are kept; older ones are summed into ``earlier``
COUNT_KEYS = ("batches", "samples", "steps", "tokens", "microseconds")  # the train stage, lifetime scope
RUNNING = "running"
COMPLETED = "completed"
CRASHED = "crashed"
INTERRUPTED = "interrupted"
STOPPED_EARLY = "stopped_early"
ENDINGS = (RUNNING, COMPLETED, CRASHED, INTERRUPTED, STOPPED_EARLY)
UNKNOWN = "unknown"  # lost work that no heartbeat measured
NOTHING_LOST = dict.fromkeys(COUNT_KEYS, 0)  # read-only: copy it
ENTRY_KEYS = (
    "kind",
    "opened_unix_microseconds",
    "world_size",
    "global_batch_size",
    "accumulation",
    "start",
    "end",
    "microseconds",
    "ended",
    "lost",
)
EARLIER_KEYS = ("runs", "microseconds", "lost_microseconds", "train_microseconds")
_KINDS = tuple(kind.value for kind in RunKind)


def empty_ledger() -> dict[str, Any]:
    """A ledger that recorded no run."""
    return {"runs": [], "earlier": dict.fromkeys(EARLIER_KEYS, 0)}


def read_entry(raw: object, key: str, last: bool) -> dict[str, Any]:
    """One ledger entry; ``last``: it may still be running."""
    fields = read_mapping(raw, key, required=ENTRY_KEYS)
    kind = fields["kind"]
    if kind not in _KINDS:
        raise ProgressStateError(join_key(key, "kind"), f"unknown run kind {shown(kind)}")
    entry: dict[str, Any] = {"kind": str(kind)}
    for name in ("opened_unix_microseconds", "world_size", "global_batch_size", "accumulation"):
        entry[name] = read_int(fields[name], join_key(key, name), minimum=1 if name == "world_size" else 0)
    start = read_counts(fields["start"], join_key(key, "start"), COUNT_KEYS)
    end = read_counts(fields["end"], join_key(key, "end"), COUNT_KEYS)
    for name in COUNT_KEYS:
        if end[name] < start[name]:
            raise ProgressStateError(join_key(key, f"end.{name}"), f"{end[name]} below the start's {start[name]}")
    entry["start"], entry["end"] = start, end
    entry["microseconds"] = read_int(fields["microseconds"], join_key(key, "microseconds"), minimum=0)
    ended = read_str(fields["ended"], join_key(key, "ended"))
    if ended not in ENDINGS:
        raise ProgressStateError(join_key(key, "ended"), f"unknown ending {shown(ended)}; expected one of {ENDINGS}")
    if ended == RUNNING and not last:
        raise ProgressStateError(join_key(key, "ended"), "only the last run can still be running")
    entry["ended"] = ended
    lost = fields["lost"]
    if lost != UNKNOWN:
        lost = read_counts(lost, join_key(key, "lost"), COUNT_KEYS)
    if ended == RUNNING and lost != NOTHING_LOST:
        raise ProgressStateError(join_key(key, "lost"), "a run still running has lost nothing yet; expected 0 counts")
    entry["lost"] = lost
    return entry


class LedgerPart(Part):
    """``ledger``, read from and written to the progress's live ledger (``progress._ledger``). It holds
    no count that ``reduce_state`` sums: each rank keeps its own history, and the writer's is saved."""

    def dump(self, live: Any) -> dict[str, Any]:
        live._ledger.update(live.train)
        dumped: dict[str, Any] = live._ledger.dump()
        return dumped

    def parse(self, raw: object, key: str) -> dict[str, Any]:
        fields = read_mapping(raw, key, required=("runs", "earlier"))
        runs = read_list(fields["runs"], join_key(key, "runs"))
        if len(runs) > MAX_LEDGER_RUNS:
            raise ProgressStateError(join_key(key, "runs"), f"{len(runs)} runs; at most {MAX_LEDGER_RUNS} are kept")
        parsed = [read_entry(run, join_key(key, f"runs.{i}"), i == len(runs) - 1) for i, run in enumerate(runs)]
        earlier = read_counts(fields["earlier"], join_key(key, "earlier"), EARLIER_KEYS)
        return {"runs": parsed, "earlier": earlier}

    def store(self, owner: Any, attr: str, value: dict[str, Any]) -> None:
        owner._ledger.load(value)
