"""``without_times``: a progress state without its wall-clock fields, to compare what two runs counted."""

from __future__ import annotations

import copy

import pytest

from tracker_core import without_times
from tracker_core.counting import _clock

from helpers.clock import TickingClock
from helpers.core_drive import in_fit_epoch


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> TickingClock:
    ticking = TickingClock()
    monkeypatch.setattr(_clock, "now_us", ticking)
    return ticking


def test_no_microseconds_entry_is_left_at_any_depth(clock: TickingClock) -> None:
    clock.advance(1)
    state = without_times(in_fit_epoch(batches=2).state_dict())
    assert "microseconds" not in state
    assert all("microseconds" not in stage for stage in state["stages"].values())


def test_the_counts_stay_as_they_were(clock: TickingClock) -> None:
    state = in_fit_epoch(batches=2).state_dict()
    assert without_times(state)["stages"]["train"]["batches"] == state["stages"]["train"]["batches"]
    assert without_times(state)["where"] == state["where"]


def test_the_given_state_is_not_changed(clock: TickingClock) -> None:
    state = in_fit_epoch(batches=2).state_dict()
    before = copy.deepcopy(state)
    without_times(state)
    assert state == before


def test_two_runs_that_counted_the_same_at_different_speeds_compare_equal(clock: TickingClock) -> None:
    fast = in_fit_epoch(batches=3).state_dict()
    clock.advance(7)
    slow = in_fit_epoch(batches=3)
    clock.advance(5)
    assert slow.state_dict() != fast
    assert without_times(slow.state_dict()) == without_times(fast)


def test_a_field_whose_name_ends_in_microseconds_goes_too() -> None:
    state = {"runs": [{"batches": 3, "lost_microseconds": 5, "microseconds": 2}], "train_microseconds": 1}
    assert without_times(state) == {"runs": [{"batches": 3}]}
