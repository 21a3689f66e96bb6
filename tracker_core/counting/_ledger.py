"""The live run ledger kept by ``Progress``: one entry per run or resumed stretch of one (docs/schema.md,
"The run ledger"; saved form: ``state/_ledger.py``). The clock is read when an entry opens, closes or is saved."""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from tracker_core.counting import _clock
from tracker_core.distributed._elastic import world
from tracker_core.state._ledger import (
    COMPLETED,
    COUNT_KEYS,
    CRASHED,
    MAX_LEDGER_RUNS,
    NOTHING_LOST,
    RUNNING,
    STOPPED_EARLY,
    UNKNOWN,
    empty_ledger,
)

if TYPE_CHECKING:
    from tracker_core.counting._stage import TrainStageProgress


def _train_counts(train: TrainStageProgress) -> dict[str, int]:
    """The train stage's lifetime counts as a ledger entry holds them (time already flushed)."""
    return {
        "batches": train._batches.processed,
        "samples": train._samples.total,
        "steps": sum(tally.total for tally in train._optimizer_steps),
        "tokens": train._tokens.total,
        "microseconds": train._seconds.total,
    }


_WORK = tuple(name for name in COUNT_KEYS if name != "microseconds")  # the counts of work (not times)


def _reached(beaten: dict[str, Any]) -> dict[str, int] | None:
    """How far the run of a beat's entry got: its end plus what it lost after that (None: unknown)."""
    lost = beaten["lost"]
    return None if lost == UNKNOWN else {name: beaten["end"][name] + lost[name] for name in _WORK}


def _of_this_run(beaten: dict[str, Any], entry: dict[str, Any]) -> bool:
    """A beat's entry is the restored ``entry``: the same kind, opening instant and start, not behind the checkpoint."""
    if any(beaten[name] != entry[name] for name in ("kind", "opened_unix_microseconds", "start")):
        return False
    reached = _reached(beaten)
    return reached is None or all(reached[name] >= entry["end"][name] for name in _WORK)


def _unsaved(entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` of a process whose work no checkpoint holds: it ends where it started, all it did is lost (added to
    what it had lost already; idempotent), and a running one crashed."""
    lost = entry["lost"]
    start = entry["start"]
    if lost != UNKNOWN:
        done = _lost_between(start, entry["end"], entry["microseconds"])
        lost = {name: done[name] + lost[name] for name in COUNT_KEYS}
    ended = CRASHED if entry["ended"] == RUNNING else entry["ended"]
    return {**entry, "end": dict(start), "microseconds": 0, "ended": ended, "lost": lost}


def _lost_between(saved: dict[str, int], reached: dict[str, int], microseconds: int) -> dict[str, int]:
    """What a process did after the checkpoint holding ``saved``: ``reached - saved``, ``microseconds`` (each >= 0)."""
    lost = {name: max(0, reached[name] - saved[name]) for name in _WORK}
    return {**lost, "microseconds": max(0, microseconds)}


class RunLedger:
    """The runs of a model's life, most recent last; at most one is open (``ended == "running"``)."""

    __slots__ = (
        "_base",
        "_earlier",
        "_open_since",
        "_runs",
        "heartbeat",
        "restored_open",
        "stopping_early",
    )

    def __init__(self) -> None:
        empty = empty_ledger()
        self._runs: list[dict[str, Any]] = empty["runs"]
        self._earlier: dict[str, int] = empty["earlier"]
        self._open_since: int | None = None  # the clock when this process opened the last entry
        self.restored_open = False  # the open entry was loaded: another process ran it, a resume settles it
        self.stopping_early = False  # the open run was told to stop before its limits: it completes stopped_early
        self.heartbeat: dict[str, Any] | None = None  # the last beat (a snapshot) read_heartbeat found for the load
        self._base = 0  # the ordinal of the first entry the loaded state did not hold settled: what a beat carries

    @property
    def open_entry(self) -> dict[str, Any] | None:
        """The last entry if it is still running."""
        return self._runs[-1] if self._runs and self._runs[-1]["ended"] == RUNNING else None

    @property
    def ordinal(self) -> int:
        """The number of the last entry over the model's life (0 for the first run ever)."""
        return self._earlier["runs"] + len(self._runs) - 1

    def begin(self, kind: str, train: TrainStageProgress) -> None:
        """A run begins (or a restored run is re-entered) at ``train``'s counts; an entry left open closes."""
        if self.restored_open:
            self._settle_restored()
        elif self.open_entry is not None:  # this process left it open: the framework never ended it
            self.close(CRASHED, train)
        counts = _train_counts(train)
        self._runs.append(
            {
                "kind": kind,
                "opened_unix_microseconds": _clock.unix_us(),
                "world_size": world()[0],
                "global_batch_size": 0,
                "accumulation": 0,
                "start": counts,
                "end": dict(counts),
                "microseconds": 0,
                "ended": RUNNING,
                "lost": dict(NOTHING_LOST),
            }
        )
        self._open_since, self.restored_open, self.stopping_early = _clock.now_us(), False, False
        self._drop_oldest()

    def resume(self, kind: str, train: TrainStageProgress) -> None:
        """A restored run is re-entered: the process that saved it did not end it; a new entry opens."""
        if self.restored_open or self.open_entry is None:
            self.begin(kind, train)

    def snapshot(self, train: TrainStageProgress) -> dict[str, Any] | None:
        """What a heartbeat holds (docs/schema.md, "The run ledger"), the open entry brought up to now; None
        before this process's first run or while a restored entry waits for its resume."""
        self.update(train)
        first = max(0, self._base - self._earlier["runs"])
        if first >= len(self._runs) or self.restored_open:
            return None
        return {"run": self._earlier["runs"] + first, "entries": copy.deepcopy(self._runs[first:])}

    def _settle_restored(self) -> None:
        """Close the restored open entry as its heartbeat shows, else crashed with ``unknown`` loss; the
        heartbeat writer's later entries follow it (docs/schema.md, "The run ledger")."""
        entry, beat, self.heartbeat = self._runs[-1], self.heartbeat, None
        entry["ended"], entry["lost"] = CRASHED, UNKNOWN
        at = self.ordinal - beat["run"] if beat is not None else -1  # this entry's place among the beat's
        beaten: list[dict[str, Any]] = beat["entries"][at:] if beat is not None and at >= 0 else []
        if beaten and _of_this_run(beaten[0], entry):
            mine, *after = beaten
            reached = _reached(mine)
            if reached is not None:
                wall = mine["microseconds"] + mine["lost"]["microseconds"] - entry["microseconds"]
                entry["lost"] = _lost_between(entry["end"], reached, wall)
            if mine["ended"] != RUNNING:
                entry["ended"] = mine["ended"]  # it ended after the checkpoint: what it did since is lost all the same
            self._runs.extend(_unsaved(run) for run in after)

    def close(self, ended: str, train: TrainStageProgress) -> None:
        """The open entry ends ``ended`` (``stopped_early`` for ``completed`` when stopping early), losing nothing."""
        entry = self.open_entry
        if entry is None:
            return
        self.update(train)
        if ended == COMPLETED and self.stopping_early:
            ended = STOPPED_EARLY
        entry["ended"], entry["lost"] = ended, dict(NOTHING_LOST)
        self._open_since, self.restored_open, self.stopping_early = None, False, False

    def update(self, train: TrainStageProgress) -> None:
        """Bring the open entry this process runs up to ``train``'s counts and the clock."""
        entry = self.open_entry
        if entry is None or self._open_since is None:
            return  # a restored entry stays as saved until the resume settles it
        entry["end"] = end = _train_counts(train)
        entry["microseconds"] = _clock.now_us() - self._open_since
        start = entry["start"]
        batches, samples, steps = (end[name] - start[name] for name in ("batches", "samples", "steps"))
        if batches:
            entry["global_batch_size"] = round(samples * entry["world_size"] / batches)
            entry["accumulation"] = round(batches / steps) if steps else 0

    def _drop_oldest(self) -> None:
        earlier = self._earlier
        for entry in self._runs[:-MAX_LEDGER_RUNS]:
            lost = entry["lost"]
            earlier["runs"] += 1
            earlier["microseconds"] += entry["microseconds"]
            earlier["lost_microseconds"] += lost["microseconds"] if lost != UNKNOWN else 0
            earlier["train_microseconds"] += entry["end"]["microseconds"] - entry["start"]["microseconds"]
        del self._runs[:-MAX_LEDGER_RUNS]

    def dump(self) -> dict[str, Any]:
        """Plain data (a copy): ``{"runs": [...], "earlier": {...}}``."""
        return {"runs": copy.deepcopy(self._runs), "earlier": dict(self._earlier)}

    def load(self, ledger: dict[str, Any]) -> None:
        """Replace the ledger with a parsed one; its open entry waits for the resume to settle it."""
        self._runs = copy.deepcopy(ledger["runs"])
        self._earlier = dict(ledger["earlier"])
        self._open_since, self.stopping_early = None, False
        self.restored_open = self.open_entry is not None
        self._base = self.ordinal if self.restored_open else self.ordinal + 1
