"""Lightning's "your dataloader is not resumable" warning holds for a plain loader resumed mid-epoch: the tracker
positions nothing (Lightning reads that epoch from its start), keeps that warning, warns its own
``InexactResumeWarning``, and notes nothing against it in Lightning's log."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")

import pytorch_lightning as pl

from tracker_core.integrations.lightning import ProgressTracker

from helpers.lightning_program import Recording, loader

_WARNING = "your dataloader is not resumable"


class _Killed(Exception):
    pass


class _SaveThenDie(pl.Callback):
    def __init__(self, path: Path) -> None:
        self.path = path

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == 6:  # epoch 2, batch 2 of 4
            trainer.save_checkpoint(self.path)
            raise _Killed


def _trainer(callbacks: list[pl.Callback]) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu",
        max_epochs=3,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        callbacks=callbacks,
    )


class _FiltersInFit(pl.Callback):
    """Notes the process's warning filters about the message at each train batch of the resumed fit."""

    def __init__(self) -> None:
        self.filters: list[Any] = []

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        self.filters = [entry for entry in warnings.filters if entry[1] is not None and "resumable" in entry[1].pattern]


def _resumed_mid_epoch(tmp_path: Path, callbacks: list[pl.Callback]) -> list[str]:
    """Messages warned while a fit resumes from a checkpoint taken at batch 2 of epoch 2 (0-based 1)."""
    path = tmp_path / "mid.ckpt"
    with pytest.raises(_Killed):
        _trainer([ProgressTracker(), _SaveThenDie(path)]).fit(Recording(), loader(10, 3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _trainer(callbacks).fit(Recording(), loader(10, 3), ckpt_path=path)
    return [str(warning.message) for warning in caught]


def test_lightning_warns_its_plain_loader_restarts_when_no_tracker_resumes_it(tmp_path: Path) -> None:
    assert any(_WARNING in message for message in _resumed_mid_epoch(tmp_path, []))


def test_a_tracked_plain_loader_resumed_mid_epoch_keeps_lightnings_warning_and_warns_that_its_epoch_restarts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    note = logging.getLogger("pytorch_lightning.tracker_core")
    note.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO, logger="pytorch_lightning.tracker_core"):
            messages = _resumed_mid_epoch(tmp_path, [ProgressTracker()])
    finally:
        note.removeHandler(caplog.handler)
    assert [message for message in messages if _WARNING in message]
    resuming = "resuming DataLoader over Indexed (0 workers) after 2 batches of an epoch"
    assert [message for message in messages if message.startswith(resuming) and "StatefulDataLoader" in message]
    assert "tracker_core" not in caplog.text  # no note that Lightning's warning does not apply: it does


def test_the_tracker_leaves_the_process_warning_filters_as_they_are_during_the_resumed_fit(tmp_path: Path) -> None:
    filters = _FiltersInFit()
    _resumed_mid_epoch(tmp_path, [ProgressTracker(), filters])
    assert filters.filters == []
