"""Ignite's heartbeat is kept only in the file the user names (``ProgressHandler(heartbeat=...)``), from the
trainer's STARTED, so a resume records what the crashed run did after its checkpoint (docs/ignite.md, "Lost
work"); without one the handler writes no heartbeat anywhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ignite")

from ignite.engine import Events
from ignite.handlers import Checkpoint, DiskSaver

from helpers.ignite_program import BATCH, EPOCHS, Config, Program, build, save_every_iteration


@pytest.fixture(autouse=True)
def _beat_at_every_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACKER_HEARTBEAT_SECONDS", "0")


def _crash_after(program: Program, iteration: int) -> None:
    """Run ``program``; it raises after batch ``iteration`` (1-based) completed (and was checkpointed)."""

    def crash() -> None:
        raise RuntimeError("crash")

    program.trainer.add_event_handler(Events.ITERATION_COMPLETED(once=iteration), crash)
    with pytest.raises(RuntimeError, match="crash"):
        program.run()


def _resumed_runs(
    path: Path | dict[str, Any], heartbeat: Path | None, folder: Path | None = None
) -> list[dict[str, Any]]:
    """A new program with ``heartbeat`` (saving every iteration into ``folder`` if given) loads ``path`` and runs
    to the end: its ledger."""
    program = build(Config(), seed=1234, heartbeat=heartbeat)
    if folder is not None:
        save_every_iteration(program, folder)
    Checkpoint.load_objects(program.to_save(), path if isinstance(path, dict) else str(path))
    program.run()
    runs: list[dict[str, Any]] = program.progress.view.state_dict()["ledger"]["runs"]
    return runs


def test_the_run_beats_into_the_named_file_from_its_start_before_its_first_checkpoint(tmp_path: Path) -> None:
    heartbeat = tmp_path / "heartbeat.json"
    program = build(Config(), seed=0, heartbeat=heartbeat)
    at_first_batch: list[dict[str, Any]] = []
    program.trainer.add_event_handler(
        Events.ITERATION_STARTED(once=1), lambda: at_first_batch.append(json.loads(heartbeat.read_text()))
    )
    program.run()
    (entry,) = at_first_batch[0]["entries"]
    assert (entry["kind"], entry["ended"], entry["end"]["batches"]) == ("fit", "running", 0)


def test_a_heartbeat_given_as_a_string_is_kept_in_that_file(tmp_path: Path) -> None:
    heartbeat = tmp_path / "beats" / "fit.json"
    build(Config(), seed=0, heartbeat=str(heartbeat)).run()
    (entry,) = json.loads(heartbeat.read_text())["entries"]
    assert (entry["kind"], entry["ended"], entry["end"]["batches"]) == ("fit", "completed", EPOCHS * 4)


def test_a_run_without_a_heartbeat_writes_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    build(Config(), seed=0).run()
    assert list(tmp_path.iterdir()) == []


def test_a_crashed_run_resumed_from_an_older_checkpoint_records_the_batches_it_lost(tmp_path: Path) -> None:
    heartbeat = tmp_path / "heartbeat.json"
    crashing = build(Config(), seed=0, heartbeat=heartbeat)
    save_every_iteration(crashing, tmp_path / "checkpoints")
    _crash_after(crashing, 5)  # its last beat: the save after batch 5
    crashed, completed = _resumed_runs(tmp_path / "checkpoints" / "2.pt", heartbeat, tmp_path / "checkpoints")
    assert (crashed["ended"], crashed["end"]["batches"]) == ("crashed", 2)
    lost = crashed["lost"]
    assert (lost["batches"], lost["samples"], lost["steps"]) == (3, BATCH + 1 + BATCH, 3)  # epoch 1 ends on 1 sample
    assert (completed["ended"], completed["start"]["batches"], completed["end"]["batches"]) == ("completed", 2, 12)


def test_a_run_killed_before_its_first_checkpoint_is_in_the_ledger_of_the_next_resume(tmp_path: Path) -> None:
    heartbeat = tmp_path / "heartbeat.json"
    first = build(Config(), seed=0, heartbeat=heartbeat)
    save_every_iteration(first, tmp_path)
    _crash_after(first, 5)
    second = build(Config(), seed=1, heartbeat=heartbeat)  # beats from its start, saves nothing before it crashes
    second.trainer.add_event_handler(
        Events.ITERATION_COMPLETED(every=5), Checkpoint(second.to_save(), DiskSaver(str(tmp_path / "later")))
    )
    Checkpoint.load_objects(second.to_save(), str(tmp_path / "2.pt"))
    _crash_after(second, 4)  # trained batches 3 and 4
    crashed, killed, completed = _resumed_runs(tmp_path / "2.pt", heartbeat)
    assert (crashed["ended"], crashed["end"]["batches"], crashed["lost"]["batches"]) == ("crashed", 2, 3)
    assert (killed["ended"], killed["start"]["batches"], killed["end"]["batches"]) == ("crashed", 2, 2)
    # Its last beat came at the optimizer step of batch 4 (that batch not yet ended): batch 3, and 2 steps.
    assert (killed["lost"]["batches"], killed["lost"]["steps"]) == (1, 2)
    assert (completed["start"]["batches"], completed["end"]["batches"]) == (2, 12)


def test_a_crashed_run_resumed_without_a_heartbeat_lost_unknown_work(tmp_path: Path) -> None:
    crashing = build(Config(), seed=0)
    save_every_iteration(crashing, tmp_path)
    _crash_after(crashing, 5)
    crashed, _ = _resumed_runs(tmp_path / "2.pt", None)
    assert (crashed["ended"], crashed["end"]["batches"], crashed["lost"]) == ("crashed", 2, "unknown")
