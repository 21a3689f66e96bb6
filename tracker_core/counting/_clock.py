"""The record's clocks, in whole microseconds (every scope stays an exact integer): monotonic for durations,
read at epoch and run boundaries, checkpoints and loads, never per batch; the wall clock when a run opens."""

from __future__ import annotations

from time import perf_counter_ns, time_ns


def now_us() -> int:
    """Microseconds on the monotonic performance counter (its zero is arbitrary)."""
    return perf_counter_ns() // 1000


def unix_us() -> int:
    """Microseconds since the Unix epoch on the wall clock: when a run opens, which tells two runs apart
    (never a duration: the wall clock may jump)."""
    return time_ns() // 1000
