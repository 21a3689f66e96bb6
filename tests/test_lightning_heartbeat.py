"""The Lightning fit keeps its heartbeat only in the file the user names (``ProgressTracker(heartbeat=...)``), from
``on_train_start``, before its first save; without one it writes no heartbeat anywhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint

import tracker_core
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
    """Reads the heartbeat ``file`` at the first train batch (before any checkpoint), and whether ``folder`` exists."""

    def __init__(self, file: Path, folder: Path) -> None:
        self.file, self.folder = file, folder
        self.at_first_batch: dict[str, Any] | None = None
        self.folder_at_first_batch = True

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, idx: int) -> None:
        if trainer.global_step == 0 and idx == 0:
            self.folder_at_first_batch = self.folder.exists()
            self.at_first_batch = json.loads(self.file.read_text())


def test_the_fit_beats_into_the_named_file_from_its_start_before_its_first_checkpoint(tmp_path: Path) -> None:
    heartbeat = tmp_path / "heartbeat.json"
    seen = _BeatsSeen(heartbeat, tmp_path / "checkpoints")
    saver = ModelCheckpoint(dirpath=tmp_path / "checkpoints", every_n_epochs=1)
    lp.trainer([ProgressTracker(heartbeat=heartbeat), saver, seen], max_epochs=1, enable_checkpointing=True).fit(
        lp.Recording(), lp.loader()
    )
    assert not seen.folder_at_first_batch  # ModelCheckpoint makes its folder at its first save
    assert seen.at_first_batch is not None
    (entry,) = seen.at_first_batch["entries"]
    assert (entry["kind"], entry["ended"], entry["end"]["batches"]) == ("fit", "running", 0)


def test_a_heartbeat_given_as_a_string_is_kept_in_that_file(tmp_path: Path) -> None:
    heartbeat = tmp_path / "beats" / "fit.json"
    lp.trainer([ProgressTracker(heartbeat=str(heartbeat))], max_epochs=1).fit(lp.Recording(), lp.loader())
    (entry,) = json.loads(heartbeat.read_text())["entries"]
    assert (entry["kind"], entry["ended"], entry["end"]["batches"]) == ("fit", "completed", 4)


def test_a_fit_without_a_heartbeat_writes_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    lp.trainer([ProgressTracker()], max_epochs=1).fit(lp.Recording(), lp.loader())
    assert list(tmp_path.iterdir()) == []


def test_a_crashed_fit_resumed_without_a_heartbeat_lost_unknown_work(tmp_path: Path) -> None:
    saver = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1, filename="{step}")
    crashing = lp.trainer([ProgressTracker(), saver], max_epochs=1, enable_checkpointing=True)
    with pytest.raises(RuntimeError, match="crash"):
        crashing.fit(lp.Crashing(crash_at=3), lp.loader(n=12, batch=2))
    resumed = lp.trainer([ProgressTracker()], max_epochs=1)
    resumed.fit(lp.Crashing(crash_at=None), lp.loader(n=12, batch=2), ckpt_path=tmp_path / "step=1.ckpt")
    crashed = tracker_core.get_progress(resumed).state_dict()["ledger"]["runs"][0]
    assert (crashed["ended"], crashed["end"]["batches"], crashed["lost"]) == ("crashed", 1, "unknown")
