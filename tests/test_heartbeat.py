"""The heartbeat beside the checkpoints measures what a crashed run did after its checkpoint (docs/schema.md, ``lost``)."""

from __future__ import annotations

import itertools
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tracker_core import HeartbeatWarning, Progress
from tracker_core.adapter import keep_heartbeat, read_heartbeat
from tracker_core.counting import _clock

from helpers.clock import REAL_UNIX_US
from helpers.core_drive import in_fit_epoch, json_roundtrip, whole_batch, whole_run

BEAT = "heartbeat.json"  # the file the user names for the heartbeat


@pytest.fixture(autouse=True)
def _beat_at_every_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACKER_HEARTBEAT_SECONDS", "0")


def _step(progress: Progress, samples: int = 8) -> None:
    whole_batch(progress, "train", samples)
    progress.train.optimizer_step()


def _resuming(saved: dict[str, Any], heartbeat: Path | None) -> Progress:
    """A new process loads ``saved``, reads the ``heartbeat`` file and re-enters the fit run and its epoch."""
    fresh = Progress()
    fresh.load_state_dict(json_roundtrip(saved))
    read_heartbeat(fresh, heartbeat)
    fresh.run_ready("fit")
    fresh.run_started()
    fresh.train.epoch_ready()
    fresh.train.epoch_started()
    return fresh


def _resumed(saved: dict[str, Any], heartbeat: Path | None) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = _resuming(saved, heartbeat).state_dict()["ledger"]["runs"]
    return runs


def _killed_before_its_first_checkpoint(saved: dict[str, Any], heartbeat: Path, steps: int) -> None:
    """A process resumes from ``saved``, beats beside it from its start, takes ``steps`` steps and dies."""
    process = _resuming(saved, heartbeat)
    keep_heartbeat(process, heartbeat)
    for _ in range(steps):
        _step(process)


def test_the_lost_work_is_what_the_heartbeat_saw_after_the_checkpoint(tmp_path: Path) -> None:
    progress = in_fit_epoch(batches=0)
    _step(progress)
    keep_heartbeat(progress, tmp_path / BEAT)  # the checkpoint: 1 batch
    saved = progress.state_dict()
    for _ in range(3):
        _step(progress)  # beats at each step: 4 batches reached, then the process dies
    crashed, resumed = _resumed(saved, tmp_path / BEAT)
    assert crashed["ended"] == "crashed"
    assert {k: crashed["lost"][k] for k in ("batches", "samples", "steps")} == {"batches": 3, "samples": 24, "steps": 3}
    assert resumed["start"]["batches"] == 1


def test_the_heartbeat_file_is_replaced_whole_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    progress = in_fit_epoch(batches=0)
    keep_heartbeat(progress, tmp_path / BEAT)
    _step(progress)
    assert [p.name for p in tmp_path.iterdir()] == [BEAT]
    beat = json.loads((tmp_path / BEAT).read_text())
    assert beat["entries"][-1]["end"]["batches"] == 1 and beat["entries"][-1]["ended"] == "running"


def test_without_a_heartbeat_the_lost_work_is_unknown(tmp_path: Path) -> None:
    assert _resumed(in_fit_epoch(batches=2).state_dict(), tmp_path / BEAT)[0]["lost"] == "unknown"


def test_a_heartbeat_of_another_run_number_is_not_used(tmp_path: Path) -> None:
    other = Progress()
    whole_run(other, "validate", epochs=1, batches=1)
    other.run_ready("fit")  # the model's second run
    keep_heartbeat(other, tmp_path / BEAT)
    assert _resumed(in_fit_epoch(batches=2).state_dict(), tmp_path / BEAT)[0]["lost"] == "unknown"


def test_a_heartbeat_of_another_fresh_run_in_the_same_folder_is_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    instants = itertools.count(1_000_000, 1_000_000)
    monkeypatch.setattr(_clock, "unix_us", lambda: next(instants))
    first = in_fit_epoch(batches=0)
    _step(first)
    keep_heartbeat(first, tmp_path / BEAT)
    saved = first.state_dict()  # the first run's checkpoint; the run dies
    second = in_fit_epoch(batches=0)  # started afresh in the same folder: same kind, same start counts
    keep_heartbeat(second, tmp_path / BEAT)
    for _ in range(3):
        _step(second)
    crashed, _ = _resumed(saved, tmp_path / BEAT)
    assert (crashed["ended"], crashed["lost"]) == ("crashed", "unknown")


def test_a_ledger_entry_records_the_wall_clock_instant_it_opened(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_clock, "unix_us", REAL_UNIX_US)
    before = time.time_ns() // 1000
    (entry,) = in_fit_epoch(batches=0).state_dict()["ledger"]["runs"]
    assert before <= entry["opened_unix_microseconds"] <= time.time_ns() // 1000


def test_a_run_that_completed_after_the_checkpoint_says_so_with_its_lost_work(tmp_path: Path) -> None:
    progress = in_fit_epoch(batches=1)
    keep_heartbeat(progress, tmp_path / BEAT)
    saved = progress.state_dict()
    _step(progress)
    progress.train.epoch_processed()
    progress.train.epoch_completed()
    progress.run_processed()
    progress.run_completed()
    crashed, _ = _resumed(saved, tmp_path / BEAT)
    assert crashed["ended"] == "completed" and crashed["lost"]["batches"] == 1


def test_a_damaged_heartbeat_warns_and_leaves_the_loss_unknown(tmp_path: Path) -> None:
    (tmp_path / BEAT).write_text('{"format": "tracker_core.heartbeat", "run": -1}')
    with pytest.warns(HeartbeatWarning, match="damaged heartbeat"):
        runs = _resumed(in_fit_epoch(batches=1).state_dict(), tmp_path / BEAT)
    assert runs[0]["lost"] == "unknown"


def test_an_unwritable_heartbeat_folder_warns_once_and_training_goes_on(tmp_path: Path) -> None:
    progress = in_fit_epoch(batches=0)
    keep_heartbeat(progress, tmp_path / BEAT)
    (tmp_path / BEAT).unlink()
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


def test_no_heartbeat_file_keeps_no_heartbeat() -> None:
    progress = in_fit_epoch(batches=0)
    keep_heartbeat(progress, None)
    _step(progress)
    assert progress._heartbeat is None


def _saved_then_killed(heartbeat: Path) -> dict[str, Any]:
    """A process saves at 1 batch beside its heartbeat, goes on to 4 batches and dies: the saved state."""
    progress = in_fit_epoch(batches=0)
    _step(progress)
    keep_heartbeat(progress, heartbeat)
    saved = progress.state_dict()
    for _ in range(3):
        _step(progress)
    return saved


def test_a_process_killed_before_its_first_checkpoint_is_in_the_ledger_of_the_next_resume(tmp_path: Path) -> None:
    saved = _saved_then_killed(tmp_path / BEAT)
    _killed_before_its_first_checkpoint(saved, tmp_path / BEAT, steps=2)
    first, killed, resumed = _resumed(saved, tmp_path / BEAT)
    assert (first["ended"], first["end"]["batches"], first["lost"]["batches"]) == ("crashed", 1, 3)  # kept
    assert (killed["ended"], killed["start"]["batches"], killed["end"]["batches"]) == ("crashed", 1, 1)
    assert (killed["lost"]["batches"], killed["lost"]["samples"]) == (2, 16)
    assert (resumed["ended"], resumed["start"]["batches"]) == ("running", 1)


def test_each_of_several_processes_killed_before_their_first_checkpoint_keeps_its_own_lost_work(
    tmp_path: Path,
) -> None:
    saved = _saved_then_killed(tmp_path / BEAT)
    _killed_before_its_first_checkpoint(saved, tmp_path / BEAT, steps=2)
    _killed_before_its_first_checkpoint(saved, tmp_path / BEAT, steps=1)
    runs = _resumed(saved, tmp_path / BEAT)
    assert [(run["ended"], run["end"]["batches"]) for run in runs] == [("crashed", 1)] * 3 + [("running", 1)]
    assert [run["lost"]["batches"] for run in runs] == [3, 2, 1, 0]


def test_a_resume_from_an_older_checkpoint_counts_the_lost_work_from_it_through_a_later_process_heartbeat(
    tmp_path: Path,
) -> None:
    older = in_fit_epoch(batches=0).state_dict()  # the run's checkpoint at 0 batches
    saved = _saved_then_killed(tmp_path / BEAT)  # the run reached 4 batches
    _killed_before_its_first_checkpoint(saved, tmp_path / BEAT, steps=2)  # resumed from the checkpoint at 1 batch
    first, killed, resumed = _resumed(older, tmp_path / BEAT)
    assert (first["ended"], first["end"]["batches"], first["lost"]["batches"]) == ("crashed", 0, 4)
    assert (killed["start"]["batches"], killed["end"]["batches"], killed["lost"]["batches"]) == (1, 1, 2)
    assert resumed["start"]["batches"] == 0


def test_the_checkpoint_of_a_resumed_process_is_settled_by_its_own_entry_in_its_heartbeat(tmp_path: Path) -> None:
    saved = _saved_then_killed(tmp_path / BEAT)
    process = _resuming(saved, tmp_path / BEAT)  # settles the first run (lost 3), then runs its own
    keep_heartbeat(process, tmp_path / BEAT)
    _step(process)
    own_checkpoint = process.state_dict()  # at 2 batches
    _step(process)  # then dies at 3
    first, second, resumed = _resumed(own_checkpoint, tmp_path / BEAT)
    assert (first["lost"]["batches"], second["end"]["batches"], second["lost"]["batches"]) == (3, 2, 1)
    assert (second["ended"], resumed["start"]["batches"]) == ("crashed", 2)


def test_a_heartbeat_behind_the_checkpoint_is_of_another_run_and_the_lost_work_is_unknown(tmp_path: Path) -> None:
    earlier = in_fit_epoch(batches=3)
    keep_heartbeat(earlier, tmp_path / BEAT)
    saved = earlier.state_dict()
    later = in_fit_epoch(batches=0)  # another run from scratch in the same folder: its beat replaces the earlier's
    keep_heartbeat(later, tmp_path / BEAT)
    _step(later)
    crashed, _ = _resumed(saved, tmp_path / BEAT)
    assert (crashed["ended"], crashed["lost"]) == ("crashed", "unknown")
