"""Wall-clock time in the record: per stage and scope, checkpoint saves and restores, fast-forwards.

The clock is read at epoch and run boundaries, checkpoints and loads (never per batch); each test
drives it by hand (``TickingClock``), except where the real one is the point.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from torch.utils.data import IterableDataset

from tracker_core import Progress, ProgressStateError, Tracker
from tracker_core.counting import _clock
from tracker_core.data._fast_forward import SlowResumeWarning
from tracker_core.display._report import progress_table

from helpers.clock import REAL_NOW_US, TickingClock
from helpers.core_drive import in_fit_epoch, json_roundtrip, whole_batch


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> TickingClock:
    ticking = TickingClock()
    monkeypatch.setattr(_clock, "now_us", ticking)
    return ticking


def _end_epoch(progress: Progress, stage: str = "train") -> None:
    progress.stage(stage).epoch_processed()
    progress.stage(stage).epoch_completed()


def _begin_epoch(progress: Progress, stage: str = "train") -> None:
    progress.stage(stage).epoch_ready()
    progress.stage(stage).epoch_started()


def test_a_stage_counts_the_seconds_inside_its_epochs_in_each_scope(clock: TickingClock) -> None:
    progress = in_fit_epoch(batches=1)
    clock.advance(2)
    _end_epoch(progress)
    clock.advance(5)  # between epochs: no stage's time
    _begin_epoch(progress)
    clock.advance(3)
    assert tuple(progress.view.train.seconds) == (3.0, 5.0, 5.0)


def test_an_epoch_of_another_stage_nested_in_a_train_epoch_pauses_the_train_clock(clock: TickingClock) -> None:
    progress = in_fit_epoch(batches=1)
    clock.advance(1)
    _begin_epoch(progress, "validate")
    clock.advance(4)
    _end_epoch(progress, "validate")
    clock.advance(1)
    assert progress.view.train.seconds.run == 2.0
    assert progress.view.validate.seconds.run == 4.0


def test_a_checkpoint_taken_mid_epoch_holds_the_epoch_seconds_so_far(clock: TickingClock) -> None:
    progress = in_fit_epoch(batches=1)
    clock.advance(1.5)
    assert progress.state_dict()["stages"]["train"]["microseconds"] == {
        "epoch": 1_500_000,
        "run": 1_500_000,
        "lifetime": 1_500_000,
    }


def test_a_resume_does_not_count_the_time_the_stopped_process_was_gone(clock: TickingClock) -> None:
    saved = json_roundtrip(in_fit_epoch(batches=1).state_dict())
    clock.advance(3)
    saved = json_roundtrip(_saved_after(saved, clock, 3))
    clock.advance(1000)  # the process is gone
    resumed = Progress()
    resumed.load_state_dict(saved)
    resumed.run_ready("fit")
    resumed.run_started()
    _begin_epoch(resumed)
    clock.advance(2)
    _end_epoch(resumed)
    assert tuple(resumed.view.train.seconds) == (5.0, 5.0, 5.0)


def test_an_epoch_resumed_without_epoch_ready_times_from_the_resumed_run_start(clock: TickingClock) -> None:
    saved = json_roundtrip(in_fit_epoch(batches=1).state_dict())
    clock.advance(1000)  # the process is gone
    resumed = Progress()
    resumed.load_state_dict(saved)
    resumed.run_ready("fit")
    resumed.run_started()  # Lightning goes on with the epoch's batches, no epoch_ready
    clock.advance(2)
    _end_epoch(resumed)
    assert resumed.view.train.seconds.lifetime == 2.0


def _saved_after(state: dict[str, Any], clock: TickingClock, seconds: float) -> dict[str, Any]:
    """``state`` re-entered and trained on for ``seconds`` more, saved."""
    progress = Progress()
    progress.load_state_dict(state)
    progress.run_ready("fit")
    progress.run_started()
    _begin_epoch(progress)
    clock.advance(seconds)
    return progress.state_dict()


def test_a_new_run_starts_its_run_scope_at_zero_and_the_lifetime_carries_on(clock: TickingClock) -> None:
    progress = in_fit_epoch(batches=1)
    clock.advance(4)
    _end_epoch(progress)
    progress.run_processed()
    progress.run_completed()
    progress.run_ready("fit")
    progress.run_started()
    _begin_epoch(progress)
    clock.advance(1)
    assert tuple(progress.view.train.seconds) == (1.0, 1.0, 5.0)


def test_samples_per_second_are_the_samples_over_the_seconds_of_each_scope(clock: TickingClock) -> None:
    progress = in_fit_epoch(batches=3, samples=8)
    clock.advance(2)
    assert tuple(progress.view.train.samples_per_second) == (12.0, 12.0, 12.0)


def test_samples_per_second_are_none_before_any_time_was_counted() -> None:
    assert tuple(Progress().view.train.samples_per_second) == (None, None, None)


def test_the_time_spent_building_a_checkpoint_entry_is_in_the_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    _stepping_clock(monkeypatch)
    entry = Tracker().state_dict()
    assert entry["progress"]["microseconds"]["checkpoint_save"]["lifetime"] > 0


def test_a_restore_counts_its_seconds_after_the_loaded_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    _stepping_clock(monkeypatch)
    entry = Tracker().state_dict()
    saved = entry["progress"]["microseconds"]["checkpoint_restore"]["lifetime"]
    tracker = Tracker()
    tracker.load_state_dict(entry)
    assert tracker.view.overhead_seconds.checkpoint_restore.lifetime * 1e6 > saved


class _Stepping(TickingClock):
    """Moves on a millisecond at each reading."""

    def __call__(self) -> int:
        self.us += 1000
        return self.us


def _stepping_clock(monkeypatch: pytest.MonkeyPatch) -> _Stepping:
    stepping = _Stepping()
    monkeypatch.setattr(_clock, "now_us", stepping)
    return stepping


class _Stream(IterableDataset[int]):
    """An iterable with no state of its own: a StatefulDataLoader's resume reads its consumed batches again."""

    def __iter__(self) -> Iterator[int]:
        for i in range(12):
            time.sleep(0.001)
            yield i


def test_a_resume_that_reads_batches_again_records_the_seconds_in_the_progress(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_clock, "now_us", REAL_NOW_US)
    stateful_dataloader = pytest.importorskip("torchdata.stateful_dataloader")
    tracker = Tracker()
    loader = stateful_dataloader.StatefulDataLoader(_Stream(), batch_size=2)
    tracker.track_train_loader(loader)
    progress = tracker.progress
    progress.run_ready("fit")
    progress.run_started()
    _begin_epoch(progress)
    for _, batch in zip(range(3), loader, strict=False):
        whole_batch(progress, samples=len(batch))
    entry = tracker.state_dict()
    resumed = Tracker()
    again = stateful_dataloader.StatefulDataLoader(_Stream(), batch_size=2)
    resumed.track_train_loader(again)
    with pytest.warns(SlowResumeWarning):  # the load builds the resumed iterator, reading the batches again
        resumed.load_state_dict(entry)
    next(iter(again))
    seconds = resumed.view.overhead_seconds.fast_forward
    assert seconds.lifetime >= 0.003
    assert resumed.state_dict()["progress"]["microseconds"]["fast_forward"]["lifetime"] == round(seconds.lifetime * 1e6)


def test_an_epoch_time_above_the_run_time_is_refused_naming_the_key() -> None:
    state = in_fit_epoch(batches=1).state_dict()
    state["stages"]["validate"]["microseconds"]["epoch"] = 7
    with pytest.raises(ProgressStateError, match=r"stages\.validate\.microseconds'?: epoch scope 7 above run scope 0"):
        Progress().load_state_dict(state)


def test_a_negative_time_is_refused_naming_the_key() -> None:
    state = Progress().state_dict()
    state["microseconds"]["fast_forward"]["run"] = -1
    with pytest.raises(ProgressStateError, match=r"microseconds\.fast_forward\.run"):
        Progress().load_state_dict(state)


def test_the_table_shows_each_stage_s_seconds_and_samples_per_second(clock: TickingClock) -> None:
    progress = in_fit_epoch(batches=3, samples=8)
    clock.advance(2)
    lines = progress_table(progress.state_dict()).splitlines()
    assert [
        line.split() for line in lines if line.split()[:1] in (["seconds"], ["samples/s"]) and "over" not in line
    ] == [
        ["seconds", "2.00", "2.00", "2.00"],
        ["samples/s", "12.0", "12.0", "12.0"],
    ]


def test_the_table_shows_the_lifetime_seconds_of_saves_restores_and_fast_forwards() -> None:
    state = Progress().state_dict()
    state["microseconds"] = {
        "checkpoint_save": {"run": 250_000, "lifetime": 1_250_000},
        "checkpoint_restore": {"run": 0, "lifetime": 500_000},
        "fast_forward": {"run": 0, "lifetime": 3_000_000},
    }
    assert progress_table(state).splitlines()[-2] == (
        "seconds over the lifetime: checkpoint saves 1.25, restores 0.50, fast-forward (batches read again) 3.00"
    )
