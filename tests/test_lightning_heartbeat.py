"""The Lightning fit beats beside its ModelCheckpoint's files from ``on_train_start``, before its first save."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint

from tracker_core.adapter import HEARTBEAT_FILE
from tracker_core.integrations.lightning import ProgressTracker

from helpers import lightning_program as lp

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning:pytorch_lightning"),
    pytest.mark.filterwarnings("ignore::UserWarning:lightning_fabric"),
]


@pytest.fixture(autouse=True)
def _beat_at_every_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACKER_HEARTBEAT_SECONDS", "0")


class _BeatsSeen(pl.Callback):
    """Reads the heartbeat file in ``folder`` at the first train batch (before any checkpoint of the fit)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.at_first_batch: dict[str, Any] | None = None
        self.files_at_first_batch: list[str] = []

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, idx: int) -> None:
        if trainer.global_step == 0 and idx == 0:
            self.files_at_first_batch = sorted(p.name for p in self.folder.iterdir())
            self.at_first_batch = json.loads((self.folder / HEARTBEAT_FILE).read_text())


def test_the_fit_beats_from_its_start_before_its_first_checkpoint(tmp_path: Path) -> None:
    seen = _BeatsSeen(tmp_path)
    saver = ModelCheckpoint(dirpath=tmp_path, every_n_epochs=1)
    lp.trainer([ProgressTracker(), saver, seen], max_epochs=1, enable_checkpointing=True).fit(
        lp.Recording(), lp.loader()
    )
    assert seen.files_at_first_batch == [HEARTBEAT_FILE]  # no checkpoint yet
    assert seen.at_first_batch is not None
    (entry,) = seen.at_first_batch["entries"]
    assert (entry["kind"], entry["ended"], entry["end"]["batches"]) == ("fit", "running", 0)


def test_a_fit_without_a_model_checkpoint_writes_no_heartbeat(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    lp.trainer([ProgressTracker()], max_epochs=1).fit(lp.Recording(), lp.loader())
    assert list(tmp_path.iterdir()) == []


def test_a_model_checkpoint_at_a_url_gets_no_heartbeat_in_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("fsspec")
    monkeypatch.chdir(tmp_path)
    saver = ModelCheckpoint(dirpath="memory://heartbeat-test/checkpoints", every_n_train_steps=1)
    lp.trainer([ProgressTracker(), saver], max_epochs=1, enable_checkpointing=True).fit(lp.Recording(), lp.loader())
    assert list(tmp_path.iterdir()) == []
