"""The display core: exact lines from a real Progress driven by hand, with a fake clock."""

from __future__ import annotations

import io
import sys

import pytest

from tracker_core import Progress
from tracker_core.display._display import Display, Status, format_status


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _fit(progress: Progress) -> None:
    progress.run_ready("fit")
    progress.run_started()


def _batch(progress: Progress, stage: str = "train", samples: int = 3) -> None:
    s = progress.stage(stage)
    s.batch_ready()
    s.batch_started()
    if stage == "train":
        progress.train.optimizer_step(0)
    s.batch_processed(samples)
    s.batch_completed()


def _epoch_begin(progress: Progress, stage: str = "train") -> None:
    progress.stage(stage).epoch_ready()
    progress.stage(stage).epoch_started()


def _epoch_end(progress: Progress, stage: str = "train") -> None:
    progress.stage(stage).epoch_processed()
    progress.stage(stage).epoch_completed()


def _plain(progress: Progress, clock: Clock, interval: float = 10.0) -> tuple[Display, io.StringIO]:
    out = io.StringIO()
    return Display(progress.view, stream=out, terminal=False, interval=interval, clock=clock), out


def _train_epoch(progress: Progress, display: Display, clock: Clock, batches: int, seconds: float) -> None:
    """One train epoch of ``batches`` batches of 3 samples, ``seconds`` each, shown as an adapter would."""
    _epoch_begin(progress)
    display.update("train")
    for _ in range(batches):
        clock.now += seconds
        _batch(progress)
        display.update("train")
    _epoch_end(progress)
    display.epoch_end("train")


# the line format --------------------------------------------------------------------------
def test_format_status_shows_every_known_field_in_one_line() -> None:
    status = Status("train", 2, 3, 4, 6, 10, 12.25, 3725.4)
    assert format_status(status) == "train    | epoch 2/3 | batch 4/6 | steps 10 | 12.2 samples/s | ETA 1:02:05"


def test_format_status_omits_unknown_totals_rates_and_the_epoch_outside_a_fit() -> None:
    assert format_status(Status("test", None, None, 5, None, None, None, None)) == "test     | batch 5"


# plain lines ------------------------------------------------------------------------------
def test_an_epoch_end_prints_its_final_line_with_rate_and_eta_of_the_remaining_epochs() -> None:
    progress, clock = Progress(), Clock()
    display, out = _plain(progress, clock)
    display.set_max_epochs(2)
    display.set_batches("train", 4)
    _fit(progress)
    _train_epoch(progress, display, clock, batches=4, seconds=0.5)
    assert out.getvalue().splitlines() == [
        "train    | epoch 1/2 | batch 4/4 | steps 4 | 6.0 samples/s | ETA 0:00:02",
    ]


def test_plain_lines_come_every_interval_seconds_between_epoch_ends() -> None:
    progress, clock = Progress(), Clock()
    display, out = _plain(progress, clock, interval=10.0)
    display.set_max_epochs(1)
    display.set_batches("train", 10)
    _fit(progress)
    _train_epoch(progress, display, clock, batches=10, seconds=3.0)
    assert out.getvalue().splitlines() == [
        "train    | epoch 1/1 | batch 4/10 | steps 4 | 1.0 samples/s | ETA 0:00:18",  # t=12
        "train    | epoch 1/1 | batch 8/10 | steps 8 | 1.0 samples/s | ETA 0:00:06",  # t=24
        "train    | epoch 1/1 | batch 10/10 | steps 10 | 1.0 samples/s | ETA 0:00:00",  # epoch end, t=30
    ]


def test_rates_are_smoothed_so_one_slow_interval_moves_them_only_part_way() -> None:
    progress, clock = Progress(), Clock()
    display, out = _plain(progress, clock, interval=100.0)
    _fit(progress)
    _train_epoch(progress, display, clock, batches=2, seconds=1.5)  # 2 samples/s
    _train_epoch(progress, display, clock, batches=2, seconds=3.0)  # 1 sample/s: 0.3 * 1 + 0.7 * 2
    lines = out.getvalue().splitlines()
    assert lines == [
        "train    | epoch 1 | batch 2 | steps 2 | 2.0 samples/s",
        "train    | epoch 2 | batch 2 | steps 4 | 1.7 samples/s",
    ]


def test_time_spent_validating_does_not_lower_the_train_rate() -> None:
    progress, clock = Progress(), Clock()
    display, out = _plain(progress, clock, interval=100.0)
    display.set_batches("validate", 2)
    _fit(progress)
    _epoch_begin(progress)
    display.update("train")
    for _ in range(2):
        clock.now += 1.0
        _batch(progress)
        display.update("train")
    _epoch_begin(progress, "validate")
    display.update("validate")
    for _ in range(2):
        clock.now += 10.0
        _batch(progress, "validate", samples=5)
        display.update("validate")
    _epoch_end(progress, "validate")
    display.epoch_end("validate")
    display.update("train")
    clock.now += 1.0
    _batch(progress)
    _epoch_end(progress)
    display.epoch_end("train")
    assert out.getvalue().splitlines() == [
        "validate | epoch 1 | batch 2/2 | steps 2 | 0.5 samples/s | ETA 0:00:00",
        "train    | epoch 1 | batch 3 | steps 3 | 3.0 samples/s",  # 3 batches of 3 in 3 train seconds
    ]


def test_an_evaluation_run_outside_a_fit_shows_neither_epoch_nor_steps() -> None:
    progress, clock = Progress(), Clock()
    display, out = _plain(progress, clock)
    display.set_batches("test", 3)
    progress.run_ready("test")
    progress.run_started()
    _epoch_begin(progress, "test")
    display.update("test")
    for _ in range(3):
        clock.now += 1.0
        _batch(progress, "test", samples=4)
        display.update("test")
    _epoch_end(progress, "test")
    display.epoch_end("test")
    assert out.getvalue().splitlines() == ["test     | batch 3/3 | 4.0 samples/s | ETA 0:00:00"]


def test_no_rate_is_shown_before_a_second_of_the_stage_has_passed() -> None:
    progress, clock = Progress(), Clock()
    display, out = _plain(progress, clock)
    display.set_max_epochs(1)
    display.set_batches("train", 2)
    _fit(progress)
    _train_epoch(progress, display, clock, batches=2, seconds=0.25)
    assert out.getvalue().splitlines() == ["train    | epoch 1/1 | batch 2/2 | steps 2"]


def test_counts_that_go_back_after_a_checkpoint_load_restart_the_measurement() -> None:
    progress, clock = Progress(), Clock()
    display, out = _plain(progress, clock, interval=2.0)
    _fit(progress)
    _epoch_begin(progress)
    display.update("train")
    clock.now = 1.0
    _batch(progress)
    display.update("train")
    saved = progress.state_dict()
    clock.now = 2.0
    _batch(progress)
    display.update("train")  # 6 samples in 2 s
    progress.load_state_dict(saved)  # back to one batch
    _epoch_begin(progress)
    clock.now = 4.0
    display.update("train")  # counts went back: measured from here, the rate kept
    clock.now = 7.0
    _batch(progress)
    display.update("train")  # 3 samples in 3 s: 0.3 * 1.0 + 0.7 * 3.0
    assert out.getvalue().splitlines() == [
        "train    | epoch 1 | batch 2 | steps 2 | 3.0 samples/s",
        "train    | epoch 1 | batch 1 | steps 1 | 3.0 samples/s",
        "train    | epoch 1 | batch 2 | steps 2 | 2.4 samples/s",
    ]


def test_write_prints_a_plain_line() -> None:
    progress, clock = Progress(), Clock()
    display, out = _plain(progress, clock)
    display.write("hello")
    assert out.getvalue() == "hello\n"


def test_a_stream_that_is_not_a_terminal_gets_plain_lines() -> None:
    progress, clock = Progress(), Clock()
    out = io.StringIO()
    display = Display(progress.view, stream=out, clock=clock)
    display.set_batches("train", 1)
    _fit(progress)
    _train_epoch(progress, display, clock, batches=1, seconds=2.0)
    assert out.getvalue() == "train    | epoch 1 | batch 1/1 | steps 1 | 1.5 samples/s\n"


# terminal ---------------------------------------------------------------------------------
def test_terminal_mode_draws_a_live_bar_and_keeps_each_epoch_line() -> None:
    progress, clock = Progress(), Clock()
    out = io.StringIO()
    display = Display(progress.view, stream=out, terminal=True, clock=clock)
    display.set_max_epochs(2)
    display.set_batches("train", 3)
    _fit(progress)
    for _ in range(2):
        _train_epoch(progress, display, clock, batches=3, seconds=0.5)
    display.close()
    text = out.getvalue()
    assert "\x1b[" in text  # drawn with terminal control codes
    assert "━" in text  # the bar
    assert "train    | epoch 1/2 | batch 3/3 | steps 3 | 6.0 samples/s | ETA 0:00:02" in text
    assert "train    | epoch 2/2 | batch 3/3 | steps 6 | 6.0 samples/s" in text


def test_without_rich_a_terminal_gets_plain_lines_after_saying_why(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [m for m in sys.modules if m == "rich" or m.startswith("rich.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "rich", None)  # import rich now raises ImportError
    progress, clock = Progress(), Clock()
    out = io.StringIO()
    display = Display(progress.view, stream=out, terminal=True, clock=clock)
    _fit(progress)
    _train_epoch(progress, display, clock, batches=1, seconds=2.0)
    assert out.getvalue().splitlines() == [
        'progress display: rich is not installed (pip install "tracker-core[display]"), printing plain lines instead',
        "train    | epoch 1 | batch 1 | steps 1 | 1.5 samples/s",
    ]
