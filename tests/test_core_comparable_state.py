"""``comparable_state``: a progress state without its wall-clock fields and run ledger, to compare what two runs
counted."""

from __future__ import annotations

import copy

import pytest

from tracker_core import Progress, comparable_state
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
    state = comparable_state(in_fit_epoch(batches=2).state_dict())
    assert "microseconds" not in state
    assert all("microseconds" not in stage for stage in state["stages"].values())


def test_the_counts_stay_as_they_were(clock: TickingClock) -> None:
    state = in_fit_epoch(batches=2).state_dict()
    assert comparable_state(state)["stages"]["train"]["batches"] == state["stages"]["train"]["batches"]
    assert comparable_state(state)["where"] == state["where"]


def test_the_given_state_is_not_changed(clock: TickingClock) -> None:
    state = in_fit_epoch(batches=2).state_dict()
    before = copy.deepcopy(state)
    comparable_state(state)
    assert state == before


def test_two_runs_that_counted_the_same_at_different_speeds_compare_equal(clock: TickingClock) -> None:
    fast = in_fit_epoch(batches=3).state_dict()
    clock.advance(7)
    slow = in_fit_epoch(batches=3)
    clock.advance(5)
    assert slow.state_dict() != fast
    assert comparable_state(slow.state_dict()) == comparable_state(fast)


def test_a_field_whose_name_ends_in_microseconds_goes_too() -> None:
    state = {"runs": [{"batches": 3, "lost_microseconds": 5, "microseconds": 2}], "train_microseconds": 1}
    assert comparable_state(state) == {"runs": [{"batches": 3}]}


def test_the_run_ledger_goes() -> None:
    state = in_fit_epoch(batches=2).state_dict()
    assert state["ledger"]["runs"]
    assert "ledger" not in comparable_state(state)


def test_a_resumed_run_compares_equal_to_the_uninterrupted_one_though_its_ledger_differs() -> None:
    uninterrupted = in_fit_epoch(batches=2)
    resumed = Progress()
    resumed.load_state_dict(in_fit_epoch(batches=2).state_dict())
    resumed.run_ready("fit")
    resumed.run_started()
    assert resumed.state_dict()["ledger"] != uninterrupted.state_dict()["ledger"]
    assert comparable_state(resumed.state_dict()) == comparable_state(uninterrupted.state_dict())
