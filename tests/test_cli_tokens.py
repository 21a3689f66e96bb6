"""Tokens in ``progress-tracker inspect``: tokens seen, non-padding tokens and tokens/s per stage and scope."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tracker_core import Progress
from tracker_core.counting import _clock
from tracker_core.display._report import progress_table

from helpers.clock import TickingClock
from helpers.core_drive import in_fit_epoch
from helpers.tokens import text_dataset


def _rows(table: str) -> dict[str, list[str]]:
    """The table's rows by their count's name (the cells after it: epoch, run, lifetime)."""
    rows = {}
    for line in table.splitlines():
        cells = line.split("  ")
        cells = [cell.strip() for cell in cells if cell.strip()]
        if len(cells) >= 4:
            rows.setdefault(cells[-4], cells[-3:])
    return rows


def _tokens_in_two_epochs(clock: TickingClock) -> Progress:
    """Two train epochs of 2 s, each of 2 batches of 300 tokens, 200 of them not padding."""
    progress = in_fit_epoch()
    for epoch in range(2):
        if epoch:
            progress.train.epoch_ready()
            progress.train.epoch_started()
        for _ in range(2):
            clock.advance(1)
            train = progress.train
            train.batch_ready()
            train.batch_started()
            train.count_tokens(300, 200)
            train.batch_processed(4)
            train.batch_completed()
        progress.train.epoch_processed()
        progress.train.epoch_completed()
    return progress


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> TickingClock:
    ticking = TickingClock()
    monkeypatch.setattr(_clock, "now_us", ticking)
    return ticking


def test_the_table_shows_tokens_non_padding_tokens_and_tokens_per_second_in_each_scope(clock: TickingClock) -> None:
    rows = _rows(progress_table(_tokens_in_two_epochs(clock).state_dict()))
    assert rows["tokens"] == ["600", "1200", "1200"]
    assert rows["non-padding tokens"] == ["400", "800", "800"]
    assert rows["tokens/s"] == ["300.0", "300.0", "300.0"]


def test_a_stage_that_counted_no_tokens_has_no_token_rows(clock: TickingClock) -> None:
    table = progress_table(in_fit_epoch(batches=2).state_dict())
    assert "tokens" not in table


def test_inspect_of_an_ignite_checkpoint_shows_the_tokens_its_run_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("ignite")
    from ignite.engine import Engine, Events
    from ignite.handlers import Checkpoint, DiskSaver

    from tracker_core.cli import main
    from tracker_core.integrations.ignite import ProgressHandler

    trainer, progress = Engine(lambda engine, batch: None), ProgressHandler()
    progress.attach(trainer)
    to_save = {"trainer": trainer, "progress": progress}
    trainer.add_event_handler(
        Events.COMPLETED, Checkpoint(to_save, DiskSaver(str(tmp_path)), global_step_transform=lambda *_: 0)
    )
    trainer.run(torch.utils.data.DataLoader(text_dataset(), batch_size=2), max_epochs=2)
    assert main(["inspect", str(next(tmp_path.glob("*.pt")))]) == 0
    rows = _rows(capsys.readouterr().out)
    assert rows["tokens"] == ["20", "40", "40"]  # 4 rows of 5 tokens per epoch
    assert rows["non-padding tokens"] == ["14", "28", "28"]  # rows padded by 0, 1, 2, 3
    assert len(rows["tokens/s"]) == 3
