"""The tracker's clock in tests: stopped by default, so two runs record the same seconds (0) and their
progress states compare equal; a test of time drives its own clock (``TickingClock``) or the real one."""

from __future__ import annotations

from collections.abc import Callable

from tracker_core.counting import _clock

REAL_NOW_US: Callable[[], int] = _clock.now_us
REAL_UNIX_US: Callable[[], int] = _clock.unix_us


def _stopped() -> int:
    return 0


def stop_clock() -> None:
    """Every reading of the tracker's clocks is 0 (done on importing ``helpers``, also in spawned processes):
    ledger entries open at the unknown instant 0."""
    _clock.now_us = _stopped
    _clock.unix_us = _stopped


class TickingClock:
    """A clock the test moves: ``clock.advance(seconds)``; install with ``monkeypatch.setattr(_clock, "now_us", clock)``."""

    def __init__(self) -> None:
        self.us = 0

    def __call__(self) -> int:
        return self.us

    def advance(self, seconds: float) -> None:
        self.us += round(seconds * 1_000_000)
