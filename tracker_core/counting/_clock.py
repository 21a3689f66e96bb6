"""The one clock the record reads its seconds from: monotonic, in whole microseconds; and the wall-clock
instant a ledger entry opens.

Read only at epoch and run boundaries, at checkpoints and at loads, never per batch.
Microseconds keep every scope an exact integer (a saved second is ``microseconds / 1e6``).
"""

from __future__ import annotations

from time import perf_counter_ns, time_ns


def now_us() -> int:
    """Microseconds on the monotonic performance counter (its zero is arbitrary)."""
    return perf_counter_ns() // 1000


def unix_us() -> int:
    """Microseconds since the Unix epoch on the wall clock: when a run opens, which tells two runs apart
    (never a duration: the wall clock may jump)."""
    return time_ns() // 1000
