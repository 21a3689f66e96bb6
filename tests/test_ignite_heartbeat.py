"""Ignite's heartbeat: kept in the folder of a ``Checkpoint(..., DiskSaver(dirname))`` that saves the handler,
so a resume records what the crashed run did after its checkpoint (docs/ignite.md, "Lost work")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ignite")

from ignite.engine import Events
from ignite.handlers import Checkpoint, DiskSaver, ModelCheckpoint

from tracker_core.adapter import HEARTBEAT_FILE
from tracker_core.integrations.ignite._compat import checkpoint_dirnames

from helpers.ignite_program import BATCH, Config, Program, build, save_every_iteration


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


def _resumed_runs(path: Path | dict[str, Any], saving: Any = None) -> list[dict[str, Any]]:
    """A new program, saving through ``saving(program)``, loads ``path`` and runs to the end: its ledger."""
    program = build(Config(), seed=1234)
    if saving is not None:
        saving(program)
    Checkpoint.load_objects(program.to_save(), path if isinstance(path, dict) else str(path))
    program.run()
    runs: list[dict[str, Any]] = program.progress.view.state_dict()["ledger"]["runs"]
    return runs


def test_a_crashed_run_resumed_from_an_older_checkpoint_records_the_batches_it_lost(tmp_path: Path) -> None:
    crashing = build(Config(), seed=0)
    save_every_iteration(crashing, tmp_path)
    _crash_after(crashing, 5)
    assert (tmp_path / HEARTBEAT_FILE).exists()
    crashed, completed = _resumed_runs(tmp_path / "2.pt", lambda program: save_every_iteration(program, tmp_path))
    assert (crashed["ended"], crashed["end"]["batches"]) == ("crashed", 2)
    lost = crashed["lost"]
    assert (lost["batches"], lost["samples"], lost["steps"]) == (3, BATCH + 1 + BATCH, 3)  # epoch 1 ends on 1 sample
    assert (completed["ended"], completed["start"]["batches"], completed["end"]["batches"]) == ("completed", 2, 12)


def test_a_run_killed_before_its_first_checkpoint_is_in_the_ledger_of_the_next_resume(tmp_path: Path) -> None:
    def save_every_fifth(program: Program) -> None:
        saving = Checkpoint(program.to_save(), DiskSaver(str(tmp_path), require_empty=False))
        program.trainer.add_event_handler(Events.ITERATION_COMPLETED(every=5), saving)

    first = build(Config(), seed=0)
    save_every_iteration(first, tmp_path)
    _crash_after(first, 5)
    second = build(Config(), seed=1)  # beats beside 2.pt from its start, saves nothing before it crashes
    save_every_fifth(second)
    Checkpoint.load_objects(second.to_save(), str(tmp_path / "2.pt"))
    _crash_after(second, 4)  # trained batches 3 and 4
    crashed, killed, completed = _resumed_runs(
        tmp_path / "2.pt", lambda program: save_every_iteration(program, tmp_path)
    )
    assert (crashed["ended"], crashed["end"]["batches"], crashed["lost"]["batches"]) == ("crashed", 2, 3)
    assert (killed["ended"], killed["start"]["batches"], killed["end"]["batches"]) == ("crashed", 2, 2)
    # Its last beat came as the exception left its run: batches 3 and 4 processed and stepped.
    assert (killed["lost"]["batches"], killed["lost"]["steps"]) == (2, 2)
    assert (completed["start"]["batches"], completed["end"]["batches"]) == (2, 12)


def test_the_heartbeat_goes_beside_an_evaluator_checkpoint_that_saves_the_handler(tmp_path: Path) -> None:
    def save_best(program: Program) -> None:
        best = Checkpoint(
            program.to_save(),
            DiskSaver(str(tmp_path), require_empty=False),
            score_function=lambda _: float(program.trainer.state.epoch),  # each epoch better than the last
            filename_pattern="best_{score}.pt",
        )
        program.evaluator.add_event_handler(Events.COMPLETED, best)

    crashing = build(Config(), seed=0)
    save_best(crashing)
    _crash_after(crashing, 7)  # epoch 2, batch 3
    crashed, _ = _resumed_runs(tmp_path / "best_1.0000.pt", save_best)  # saved after epoch 1: 4 batches
    # The last beat came as the exception left the run, after batch 7: 3 batches after the checkpoint.
    assert (crashed["ended"], crashed["end"]["batches"], crashed["lost"]["batches"]) == ("crashed", 4, 3)


def test_without_a_disk_saver_folder_there_is_no_heartbeat_and_the_lost_work_is_unknown(tmp_path: Path) -> None:
    kept: dict[str, Any] = {}

    def in_memory(checkpoint: dict[str, Any], filename: str, metadata: Any = None) -> None:
        kept[filename] = checkpoint

    crashing = build(Config(), seed=0)
    crashing.trainer.add_event_handler(
        Events.ITERATION_COMPLETED(once=2), Checkpoint(crashing.to_save(), in_memory, filename_prefix="at2")
    )
    _crash_after(crashing, 5)
    (saved,) = kept.values()
    crashed, _ = _resumed_runs(saved)
    assert (crashed["ended"], crashed["end"]["batches"], crashed["lost"]) == ("crashed", 2, "unknown")
    assert not any(tmp_path.iterdir())


def test_checkpoint_dirnames_finds_each_disk_saver_folder_once(tmp_path: Path) -> None:
    program = build(Config(), seed=0)
    to_save = program.to_save()
    every_two = Checkpoint(to_save, DiskSaver(str(tmp_path / "a"), require_empty=False))
    program.trainer.add_event_handler(Events.ITERATION_COMPLETED(every=2), every_two)  # a filtered event
    program.trainer.add_event_handler(Events.EPOCH_COMPLETED, every_two)
    program.trainer.add_event_handler(Events.COMPLETED, Checkpoint(to_save, str(tmp_path / "b")))  # a folder
    saving_c = ModelCheckpoint(str(tmp_path / "c"), require_empty=False)
    program.trainer.add_event_handler(Events.COMPLETED, saving_c, {"model": program.model})
    assert sorted(checkpoint_dirnames(program.trainer)) == [str(tmp_path / name) for name in "abc"]


def test_checkpoint_dirnames_holding_keeps_only_the_checkpoints_that_save_that_object(tmp_path: Path) -> None:
    program = build(Config(), seed=0)
    model_only = Checkpoint({"model": program.model}, DiskSaver(str(tmp_path / "best"), require_empty=False))
    program.evaluator.add_event_handler(Events.COMPLETED, model_only)
    program.evaluator.add_event_handler(Events.COMPLETED, Checkpoint(program.to_save(), str(tmp_path / "all")))
    assert sorted(checkpoint_dirnames(program.evaluator)) == [str(tmp_path / "all"), str(tmp_path / "best")]
    assert checkpoint_dirnames(program.evaluator, holding=program.progress) == [str(tmp_path / "all")]
    assert checkpoint_dirnames(program.trainer) == []


def test_checkpoint_dirnames_skips_a_checkpoint_saving_elsewhere_than_to_a_disk_saver() -> None:
    program = build(Config(), seed=0)
    program.trainer.add_event_handler(Events.COMPLETED, Checkpoint(program.to_save(), lambda *_: None))
    assert checkpoint_dirnames(program.trainer) == []
