"""Ignite's heartbeat folder: the folder of a ``Checkpoint(..., DiskSaver(dirname))`` that saves the handler."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("ignite")

from ignite.engine import Events
from ignite.handlers import Checkpoint, DiskSaver, ModelCheckpoint

from tracker_core.integrations.ignite._compat import checkpoint_dirnames

from helpers.ignite_program import Config, build


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
