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


def test_the_rate_is_richs_average_over_the_last_30_seconds_of_the_stage() -> None:
    progress, clock = Progress(), Clock()
    display, out = _plain(progress, clock, interval=100.0)
    _fit(progress)
    _train_epoch(progress, display, clock, batches=2, seconds=1.5)  # 3 samples in 1.5 s after the first batch
    _train_epoch(progress, display, clock, batches=2, seconds=3.0)  # 9 samples in 7.5 s after the first batch
    _train_epoch(progress, display, clock, batches=8, seconds=3.0)  # 24 s: the first epoch's samples fall out
    lines = out.getvalue().splitlines()
    assert lines == [
        "train    | epoch 1 | batch 2 | steps 2 | 2.0 samples/s",
        "train    | epoch 2 | batch 2 | steps 4 | 1.2 samples/s",
        "train    | epoch 3 | batch 8 | steps 12 | 1.0 samples/s",
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


def test_rate_and_eta_show_from_the_second_batch_of_an_epoch_shorter_than_a_second() -> None:
    progress, clock = Progress(), Clock()
    display, out = _plain(progress, clock)
    display.set_max_epochs(1)
    display.set_batches("train", 2)
    _fit(progress)
    _train_epoch(progress, display, clock, batches=2, seconds=0.25)
    assert out.getvalue().splitlines() == ["train    | epoch 1/1 | batch 2/2 | steps 2 | 12.0 samples/s | ETA 0:00:00"]


def test_the_live_line_shows_rate_and_eta_from_the_second_batch() -> None:
    progress, clock = Progress(), Clock()
    out = io.StringIO()
    display = Display(progress.view, stream=out, terminal=True, clock=clock)
    display.set_max_epochs(1)
    display.set_batches("train", 100)
    _fit(progress)
    _epoch_begin(progress)
    display.update("train")
    for _ in range(2):
        clock.now += 0.25
        _batch(progress)
        display.update("train")
    assert "batch 2/100 | steps 2 | 12.0 samples/s | ETA 0:00:24" in out.getvalue()


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
    display.update("train")  # counts went back: measured from here
    clock.now = 7.0
    _batch(progress)
    display.update("train")  # one measurement since the load: no rate yet
    clock.now = 9.0
    _batch(progress)
    display.update("train")  # 3 samples in 2 s
    assert out.getvalue().splitlines() == [
        "train    | epoch 1 | batch 2 | steps 2 | 3.0 samples/s",
        "train    | epoch 1 | batch 1 | steps 1",
        "train    | epoch 1 | batch 2 | steps 2",
        "train    | epoch 1 | batch 3 | steps 3 | 1.5 samples/s",
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
    display.set_batches("train", 2)
    _fit(progress)
    _train_epoch(progress, display, clock, batches=2, seconds=2.0)
    assert out.getvalue() == "train    | epoch 1 | batch 2/2 | steps 2 | 1.5 samples/s\n"


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


def test_without_rich_a_terminal_gets_plain_lines_without_rates_after_saying_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in [m for m in sys.modules if m == "rich" or m.startswith("rich.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "rich", None)  # import rich now raises ImportError
    progress, clock = Progress(), Clock()
    out = io.StringIO()
    display = Display(progress.view, stream=out, terminal=True, clock=clock)
    _fit(progress)
    _train_epoch(progress, display, clock, batches=2, seconds=2.0)
    assert out.getvalue().splitlines() == [
        'progress display: rich is not installed (pip install "tracker-core[display]"): '
        "plain lines, without samples/s or ETA",
        "train    | epoch 1 | batch 2 | steps 2",
    ]


# metrics and names ------------------------------------------------------------------------
def test_format_status_ends_with_the_metrics_in_the_order_given() -> None:
    status = Status("train", 1, 2, 3, 4, 3, None, None, (("loss", "0.25"), ("v_num", "0")))
    assert format_status(status) == "train    | epoch 1/2 | batch 3/4 | steps 3 | loss=0.25, v_num=0"


def test_metric_values_are_formatted_as_tqdms_postfix() -> None:
    import torch

    from tracker_core.display._display import format_metric

    assert [format_metric(v) for v in (0.123456, 3, torch.tensor(2.5), 1e-5, "best ")] == [
        "0.123",
        "3",
        "2.5",
        "1e-5",
        "best",
    ]


def test_each_line_shows_the_metrics_read_for_its_name_when_it_is_drawn() -> None:
    progress, clock = Progress(), Clock()
    out, asked = io.StringIO(), []

    def metrics(name: str) -> dict[str, object]:
        asked.append(name)
        return {"loss": 0.5} if name == "train" else {"acc": 0.75}

    display = Display(progress.view, stream=out, terminal=False, interval=100.0, clock=clock, metrics=metrics)
    _fit(progress)
    _train_epoch(progress, display, clock, batches=3, seconds=0.5)
    _epoch_begin(progress, "validate")
    clock.now += 0.5
    _batch(progress, "validate")
    _epoch_end(progress, "validate")
    display.epoch_end("validate", name="train-eval")
    assert asked == ["train", "train-eval"]  # read for the lines drawn only
    assert _timeless(out.getvalue()) == [
        "train    | epoch 1 | batch 3 | steps 3 | loss=0.5",
        "train-eval | epoch 1 | batch 1 | steps 3 | acc=0.75",
    ]


def test_metrics_that_raise_are_warned_about_once_and_the_lines_go_on_without_them() -> None:
    progress, clock = Progress(), Clock()
    out = io.StringIO()

    def broken(name: str) -> dict[str, object]:
        raise KeyError("loss")

    display = Display(progress.view, stream=out, terminal=False, interval=100.0, clock=clock, metrics=broken)
    _fit(progress)
    with pytest.warns(UserWarning, match="reading the metrics failed"):
        _train_epoch(progress, display, clock, batches=1, seconds=0.5)
    _train_epoch(progress, display, clock, batches=1, seconds=0.5)
    assert _timeless(out.getvalue()) == [
        "train    | epoch 1 | batch 1 | steps 1",
        "train    | epoch 2 | batch 1 | steps 2",
    ]


def _timeless(text: str) -> list[str]:
    return [
        " | ".join(part for part in line.split(" | ") if not part.endswith("samples/s") and not part.startswith("ETA"))
        for line in text.splitlines()
    ]


# beside a tqdm bar ------------------------------------------------------------------------
def test_with_a_tqdm_bar_open_lines_are_written_between_its_clear_and_its_redraw() -> None:
    from tqdm import tqdm

    progress, clock = Progress(), Clock()
    out = io.StringIO()
    display, _ = Display(progress.view, stream=out, terminal=False, clock=clock), None
    _fit(progress)
    with tqdm(total=4, file=out, desc="user bar", mininterval=0) as bar:
        bar.update(1)
        _train_epoch(progress, display, clock, batches=1, seconds=0.5)
        written = out.getvalue()
    line_at = written.index("train    | epoch 1")
    assert written[line_at - 1] == "\r"  # tqdm cleared its bar: the line starts a fresh screen line
    assert "user bar" in written[line_at:]  # and redrew the bar after it


def test_on_a_terminal_with_a_tqdm_bar_open_no_live_line_is_drawn_only_the_kept_lines() -> None:
    from tqdm import tqdm

    progress, clock = Progress(), Clock()
    out = io.StringIO()
    display = Display(progress.view, stream=out, terminal=True, clock=clock)
    _fit(progress)
    with tqdm(total=4, file=io.StringIO()):
        _train_epoch(progress, display, clock, batches=2, seconds=0.5)
    assert "━" not in out.getvalue()
    assert _timeless(out.getvalue()) == ["train    | epoch 1 | batch 2 | steps 2"]
