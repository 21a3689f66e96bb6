"""The heartbeat beside the checkpoints measures what a crashed run did after its checkpoint (docs/schema.md, ``lost``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tracker_core import Progress
from tracker_core.adapter import HEARTBEAT_FILE, HeartbeatWarning, keep_heartbeat, read_heartbeat

from helpers.core_drive import in_fit_epoch, json_roundtrip, whole_batch, whole_run


@pytest.fixture(autouse=True)
def _beat_at_every_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACKER_HEARTBEAT_SECONDS", "0")


def _step(progress: Progress, samples: int = 8) -> None:
    whole_batch(progress, "train", samples)
    progress.train.optimizer_step()


def _resumed(saved: dict[str, Any], folder: Path | None) -> list[dict[str, Any]]:
    fresh = Progress()
    fresh.load_state_dict(json_roundtrip(saved))
    read_heartbeat(fresh, folder)
    fresh.run_ready("fit")
    runs: list[dict[str, Any]] = fresh.state_dict()["ledger"]["runs"]
    return runs


def test_the_lost_work_is_what_the_heartbeat_saw_after_the_checkpoint(tmp_path: Path) -> None:
    progress = in_fit_epoch(batches=0)
    _step(progress)
    keep_heartbeat(progress, tmp_path)  # the checkpoint: 1 batch
    saved = progress.state_dict()
    for _ in range(3):
        _step(progress)  # beats at each step: 4 batches reached, then the process dies
    crashed, resumed = _resumed(saved, tmp_path)
    assert crashed["ended"] == "crashed"
    assert {k: crashed["lost"][k] for k in ("batches", "samples", "steps")} == {"batches": 3, "samples": 24, "steps": 3}
    assert resumed["start"]["batches"] == 1


def test_the_heartbeat_file_is_replaced_whole_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    progress = in_fit_epoch(batches=0)
    keep_heartbeat(progress, tmp_path)
    _step(progress)
    assert [p.name for p in tmp_path.iterdir()] == [HEARTBEAT_FILE]
    beat = json.loads((tmp_path / HEARTBEAT_FILE).read_text())
    assert beat["entry"]["end"]["batches"] == 1 and beat["entry"]["ended"] == "running"


def test_without_a_heartbeat_the_lost_work_is_unknown(tmp_path: Path) -> None:
    assert _resumed(in_fit_epoch(batches=2).state_dict(), tmp_path)[0]["lost"] == "unknown"


def test_a_heartbeat_of_another_run_number_is_not_used(tmp_path: Path) -> None:
    other = Progress()
    whole_run(other, "validate", epochs=1, batches=1)
    other.run_ready("fit")  # the model's second run
    keep_heartbeat(other, tmp_path)
    assert _resumed(in_fit_epoch(batches=2).state_dict(), tmp_path)[0]["lost"] == "unknown"


def test_a_run_that_completed_after_the_checkpoint_says_so_with_its_lost_work(tmp_path: Path) -> None:
    progress = in_fit_epoch(batches=1)
    keep_heartbeat(progress, tmp_path)
    saved = progress.state_dict()
    _step(progress)
    progress.train.epoch_processed()
    progress.train.epoch_completed()
    progress.run_processed()
    progress.run_completed()
    crashed, _ = _resumed(saved, tmp_path)
    assert crashed["ended"] == "completed" and crashed["lost"]["batches"] == 1


def test_a_damaged_heartbeat_warns_and_leaves_the_loss_unknown(tmp_path: Path) -> None:
    (tmp_path / HEARTBEAT_FILE).write_text('{"format": "tracker_core.heartbeat", "run": -1}')
    with pytest.warns(HeartbeatWarning, match="damaged heartbeat"):
        runs = _resumed(in_fit_epoch(batches=1).state_dict(), tmp_path)
    assert runs[0]["lost"] == "unknown"


def test_an_unwritable_folder_warns_once_and_training_goes_on(tmp_path: Path) -> None:
    progress = in_fit_epoch(batches=0)
    keep_heartbeat(progress, tmp_path)
    (tmp_path / HEARTBEAT_FILE).unlink()
    os.chmod(tmp_path, 0o500)
    try:
        if os.access(tmp_path, os.W_OK):
            pytest.skip("running as a user who writes anywhere")
        with pytest.warns(HeartbeatWarning, match="cannot write the heartbeat"):
            _step(progress)
        _step(progress)  # no more beats, no more warnings
    finally:
        os.chmod(tmp_path, 0o700)
    assert progress.view.train.batches.lifetime.completed == 2


def test_no_folder_keeps_no_heartbeat() -> None:
    progress = in_fit_epoch(batches=0)
    keep_heartbeat(progress, None)
    _step(progress)
    assert progress._heartbeat is None
