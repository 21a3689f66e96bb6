"""Tokens per second on the display line: shown for a stage that counted tokens, measured like samples/s."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from tracker_core import Progress
from tracker_core.display._display import Display, Status, format_status

from helpers.tokens import lightning_text_model, text_dataset


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _train_epoch(progress: Progress, display: Display, clock: Clock, tokens: list[int], seconds: float) -> None:
    """One train epoch of batches of 4 samples holding ``tokens`` tokens each (half padding), ``seconds`` each."""
    train = progress.train
    train.epoch_ready()
    train.epoch_started()
    display.update("train")
    for count in tokens:
        clock.now += seconds
        train.batch_ready()
        train.batch_started()
        if count:
            train.count_tokens(count, count // 2)
        train.batch_processed(4)
        train.batch_completed()
        display.update("train")
    train.epoch_processed()
    train.epoch_completed()
    display.epoch_end("train")


def _fit_lines(tokens: list[int], seconds: float = 0.5) -> list[str]:
    progress, clock, out = Progress(), Clock(), io.StringIO()
    display = Display(progress.view, stream=out, terminal=False, interval=100.0, clock=clock)
    progress.run_ready("fit")
    progress.run_started()
    _train_epoch(progress, display, clock, tokens, seconds)
    return out.getvalue().splitlines()


def test_format_status_shows_tokens_per_second_after_samples_per_second() -> None:
    status = Status("train", 1, 2, 3, 4, 3, 8.0, None, (("loss", "0.25"),), 12345.6)
    assert (
        format_status(status)
        == "train    | epoch 1/2 | batch 3/4 | steps 3 | 8.0 samples/s | 12,346 tokens/s | loss=0.25"
    )


def test_a_stage_that_counted_tokens_shows_its_tokens_per_second() -> None:
    assert _fit_lines([512, 512, 512, 512]) == [
        "train    | epoch 1 | batch 4 | steps 0 | 8.0 samples/s | 1,024 tokens/s"
    ]


def test_a_stage_that_counted_no_tokens_shows_no_token_rate() -> None:
    assert _fit_lines([0, 0, 0]) == ["train    | epoch 1 | batch 3 | steps 0 | 8.0 samples/s"]


def test_the_token_rate_follows_the_tokens_not_the_samples() -> None:
    # the same samples per batch, the tokens grow: 100, 300, 500 tokens in 0.5 s each after the first batch
    assert _fit_lines([100, 300, 500]) == ["train    | epoch 1 | batch 3 | steps 0 | 8.0 samples/s | 800 tokens/s"]


def test_an_ignite_run_on_text_batches_shows_tokens_per_second_after_samples_per_second() -> None:
    pytest.importorskip("ignite")
    from ignite.engine import Engine

    from tracker_core.integrations.ignite import ProgressDisplay, ProgressHandler

    trainer, out = Engine(lambda engine, batch: None), io.StringIO()
    ProgressHandler().attach(trainer)
    ProgressDisplay(stream=out, terminal=False).attach(trainer)
    trainer.run(DataLoader(text_dataset(rows=8), batch_size=2), max_epochs=2)
    last = out.getvalue().splitlines()[-1].split(" | ")  # rates are known from the second measurement
    assert last[:4] == ["train   ", "epoch 2/2", "batch 4/4", "steps 0"]
    assert last[4].endswith(" samples/s") and last[5].endswith(" tokens/s")


def _last_train_line(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("train")][-1].split(" | ")


def test_a_lightning_fit_on_text_batches_shows_tokens_per_second_after_samples_per_second(tmp_path: Path) -> None:
    pl = pytest.importorskip("pytorch_lightning")
    from tracker_core.integrations.lightning import ProgressDisplay, ProgressTracker

    out = io.StringIO()
    trainer = pl.Trainer(
        max_epochs=2,
        callbacks=[ProgressTracker(), ProgressDisplay(stream=out, terminal=False)],
        default_root_dir=tmp_path,
        enable_checkpointing=False,
        logger=False,
        enable_model_summary=False,
    )
    trainer.fit(lightning_text_model(pl), DataLoader(text_dataset(rows=8), batch_size=2))
    last = _last_train_line(out.getvalue())
    assert last[:3] == ["train   ", "epoch 2/2", "batch 4/4"]
    assert last[4].endswith(" samples/s") and last[5].endswith(" tokens/s")


def test_an_accelerate_loop_on_text_batches_shows_tokens_per_second_after_samples_per_second() -> None:
    pytest.importorskip("accelerate")
    from tracker_core.integrations.accelerate import AcceleratorProgress

    from helpers.accelerate_drive import Setup, fresh_accelerator

    accelerator, out = fresh_accelerator(Setup(accumulation=1)), io.StringIO()
    loader = accelerator.prepare(DataLoader(text_dataset(rows=8), batch_size=2))
    progress = AcceleratorProgress(accelerator)
    progress.display(stream=out, terminal=False)
    with progress.fit(2) as fit:
        for _ in fit.epochs():
            for _batch in progress.train(loader):
                pass
    last = _last_train_line(out.getvalue())
    assert last[:3] == ["train   ", "epoch 2/2", "batch 4/4"]
    assert last[4].endswith(" samples/s") and last[5].endswith(" tokens/s")
