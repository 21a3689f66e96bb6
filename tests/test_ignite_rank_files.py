"""The Ignite adapter's rank files (``RankFilesSaver``, a ``DiskSaver`` the user chooses) with Ignite's own
``Checkpoint``: a gathered entry is split on save, the rank files go with a removed checkpoint, and
``Checkpoint.load_objects`` (which never says which file it loads) finds them where they were written or beside the
file named by ``ProgressHandler.loading_from``; a ``Checkpoint``'s own ``DiskSaver`` is left as the user gave it.
2-rank entries are built in one process (the real 2-process runs: tests/test_ignite_distributed.py)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ignite")

import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint, DiskSaver

from tracker_core import ProgressStateError, Tracker
from tracker_core.integrations.ignite import ProgressHandler, RankFilesSaver


def _state(world: int) -> dict[str, Any]:
    """A ProgressHandler's state as the writer of ``world`` ranks holds it (each rank's entry under ``ranks``)."""
    entry = Tracker().state_dict()
    return {"progress_tracker": {**entry, "ranks": [entry] * world}, "gradients": []}


def _saver(folder: Path) -> RankFilesSaver:
    return RankFilesSaver(str(folder), require_empty=False)


def _evaluator(handler: ProgressHandler) -> Engine:
    evaluator = Engine(lambda engine, batch: None)
    handler.attach(evaluator, stage="validate")
    return evaluator


def test_a_saved_gathered_state_keeps_an_index_and_one_file_per_rank(tmp_path: Path) -> None:
    _saver(tmp_path)({"progress": _state(2)}, "a.pt")

    entry = torch.load(tmp_path / "a.pt", weights_only=True)["progress"]["progress_tracker"]
    save_id = entry["ranks"]["save_id"]
    assert sorted(p.name for p in (tmp_path / "a.pt.ranks" / save_id).iterdir()) == ["rank-0.json", "rank-1.json"]


def test_removing_a_checkpoint_removes_its_rank_files(tmp_path: Path) -> None:
    saver = _saver(tmp_path)
    saver({"progress": _state(2)}, "a.pt")
    saver({"progress": _state(2)}, "b.pt")

    saver.remove("a.pt")

    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.pt", "b.pt.ranks"]


def test_a_checkpoint_saving_the_progress_handler_keeps_the_disk_saver_it_was_given(tmp_path: Path) -> None:
    handler = ProgressHandler()
    evaluator = _evaluator(handler)
    saver = DiskSaver(str(tmp_path), require_empty=False)
    checkpoint = Checkpoint({"progress": handler}, saver)
    evaluator.add_event_handler(Events.COMPLETED, checkpoint)

    evaluator.run([0], max_epochs=1)

    assert checkpoint.save_handler is saver and type(saver) is DiskSaver
    assert [p.name for p in tmp_path.iterdir()] == ["progress_1.pt"]  # Ignite names it after the one object


@pytest.fixture
def moved(tmp_path: Path) -> Path:
    """A 2-rank checkpoint moved, with its rank files, away from where they were written (gone)."""
    _saver(tmp_path / "run")({"progress": _state(2)}, "a.pt")
    shutil.move(tmp_path / "run", tmp_path / "moved")
    return tmp_path / "moved" / "a.pt"


def test_load_objects_of_a_moved_checkpoint_is_refused_saying_where_the_rank_files_were_looked_for(
    moved: Path,
) -> None:
    handler = ProgressHandler()
    _evaluator(handler)

    with pytest.raises(ProgressStateError, match=r"'ranks'.*not found; looked in"):
        Checkpoint.load_objects({"progress": handler}, str(moved))
    assert handler.view.validate.batches.lifetime.completed == 0


def test_loading_from_names_the_moved_checkpoint_and_its_rank_files_are_read_beside_it(moved: Path) -> None:
    handler = ProgressHandler()
    _evaluator(handler)

    handler.loading_from(moved)
    Checkpoint.load_objects({"progress": handler}, str(moved))  # one process: rank 0's part of the 2 ranks'
