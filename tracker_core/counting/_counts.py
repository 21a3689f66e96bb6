"""Counters: a phased event count and a plain tally, each a lifetime count with run and epoch baselines
(docs/design.md, "Counting")."""

from __future__ import annotations

from typing import NamedTuple

from tracker_core._errors import EventOrderError


class PhaseCounts(NamedTuple):
    """How many events reached each phase: fetched, start hooks done, step done, end hooks done."""

    ready: int
    started: int
    processed: int
    completed: int

    @property
    def in_flight(self) -> bool:
        """True while an event is ready but not yet completed."""
        return self.ready != self.completed


class ScopeCounts(NamedTuple):
    """One count in each scope: this epoch, this run, and the lifetime of the model."""

    epoch: int
    run: int
    lifetime: int


class Phased:
    """Lifetime phase counts of one event kind; at most one event is in flight."""

    __slots__ = ("completed", "epoch_base", "name", "processed", "ready", "run_base", "started")

    def __init__(self, name: str) -> None:
        self.name = name
        self.set_all(0)
        self.run_base = self.epoch_base = 0

    def mark_ready(self) -> None:
        if self.ready != self.completed:
            raise EventOrderError(f"{self.name}: ready while the previous one is not completed")
        self.ready += 1

    def mark_started(self) -> None:
        if self.started == self.ready:
            raise EventOrderError(f"{self.name}: started before it was ready")
        self.started += 1

    def mark_processed(self) -> None:
        if self.processed == self.started:
            raise EventOrderError(f"{self.name}: processed before it was started")
        self.processed += 1

    def mark_completed(self) -> None:
        if self.completed == self.processed:
            raise EventOrderError(f"{self.name}: completed before it was processed")
        self.completed += 1

    def set_all(self, count: int) -> None:
        """Put every phase at ``count`` (no event in flight)."""
        self.ready = self.started = self.processed = self.completed = count

    def lifetime(self) -> PhaseCounts:
        return PhaseCounts(self.ready, self.started, self.processed, self.completed)

    def since(self, base: int) -> PhaseCounts:
        return PhaseCounts(self.ready - base, self.started - base, self.processed - base, self.completed - base)


class Tally:
    """A lifetime count of one quantity (samples, optimizer steps, ...)."""

    __slots__ = ("epoch_base", "run_base", "total")

    def __init__(self) -> None:
        self.total = 0
        self.run_base = self.epoch_base = 0

    def scopes(self) -> ScopeCounts:
        return ScopeCounts(self.total - self.epoch_base, self.total - self.run_base, self.total)

    def begin_epoch(self) -> None:
        self.epoch_base = self.total
