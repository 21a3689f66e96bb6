"""The Lightning adapter's checkpoint IO (``integrations/lightning/_checkpoint_io.py``) around Lightning's own
``TorchCheckpointIO``: a gathered entry is split into rank files on save, joined on load, and the rank files go
with the checkpoint when Lightning removes it (``ModelCheckpoint(save_top_k=...)``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")

import torch
from lightning_fabric.plugins import TorchCheckpointIO
from pytorch_lightning.plugins.io import AsyncCheckpointIO

from tracker_core import Tracker
from tracker_core.adapter import RankFiles, RankTensors
from tracker_core.integrations.lightning import GRADIENTS_KEY, STATE_KEY
from tracker_core.integrations.lightning._checkpoint_io import RankFilesIO


def _checkpoint(world: int) -> dict[str, Any]:
    entry = Tracker().state_dict()
    return {"callbacks": {STATE_KEY: {**entry, "ranks": [entry] * world}}, "state_dict": {}}


def test_a_saved_gathered_entry_loads_back_with_a_reader_of_its_rank_files(tmp_path: Path) -> None:
    io = RankFilesIO(TorchCheckpointIO())
    saved = _checkpoint(2)
    io.save_checkpoint(saved, tmp_path / "a.ckpt")

    entry = io.load_checkpoint(tmp_path / "a.ckpt", weights_only=True)["callbacks"][STATE_KEY]

    assert isinstance(entry["ranks"], RankFiles)
    assert list(entry["ranks"]) == saved["callbacks"][STATE_KEY]["ranks"]


def test_removing_a_checkpoint_removes_its_rank_files_and_leaves_the_others(tmp_path: Path) -> None:
    io = RankFilesIO(TorchCheckpointIO())
    io.save_checkpoint(_checkpoint(2), tmp_path / "a.ckpt")
    io.save_checkpoint(_checkpoint(2), tmp_path / "b.ckpt")

    io.remove_checkpoint(tmp_path / "a.ckpt")

    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.ckpt", "b.ckpt.ranks"]


def test_a_single_process_entry_stays_in_the_checkpoint(tmp_path: Path) -> None:
    io = RankFilesIO(TorchCheckpointIO())
    io.save_checkpoint(_checkpoint(1), tmp_path / "a.ckpt")

    assert [p.name for p in tmp_path.iterdir()] == ["a.ckpt"]
    assert isinstance(io.load_checkpoint(tmp_path / "a.ckpt")["callbacks"][STATE_KEY]["ranks"], list)


def test_each_ranks_partial_gradients_go_to_their_own_file_and_load_back(tmp_path: Path) -> None:
    io = RankFilesIO(TorchCheckpointIO())
    gradients = [[torch.full((2,), float(rank)), None] for rank in range(2)]
    io.save_checkpoint({**_checkpoint(2), GRADIENTS_KEY: {"ranks": gradients}}, tmp_path / "a.ckpt")

    loaded = io.load_checkpoint(tmp_path / "a.ckpt", weights_only=True)[GRADIENTS_KEY]["ranks"]

    assert isinstance(loaded, RankTensors) and len(loaded) == 2
    assert torch.equal(loaded[1][0], gradients[1][0]) and loaded[1][1] is None


def test_behind_an_async_checkpoint_io_older_rank_files_go_one_save_later_and_at_teardown(tmp_path: Path) -> None:
    io = RankFilesIO(AsyncCheckpointIO(TorchCheckpointIO()))
    io.save_checkpoint(_checkpoint(2), tmp_path / "last.ckpt")
    io.save_checkpoint(_checkpoint(2), tmp_path / "last.ckpt")
    kept = len(list((tmp_path / "last.ckpt.ranks").iterdir()))

    io.teardown()

    assert kept == 2  # the file on disk may still be the first save's until the thread writes the second
    assert len(list((tmp_path / "last.ckpt.ranks").iterdir())) == 1
    assert len(list(io.load_checkpoint(tmp_path / "last.ckpt")["callbacks"][STATE_KEY]["ranks"])) == 2


def test_a_link_to_a_checkpoint_reads_the_rank_files_of_the_checkpoint_it_points_to(tmp_path: Path) -> None:
    io = RankFilesIO(TorchCheckpointIO())
    io.save_checkpoint(_checkpoint(2), tmp_path / "epoch=0.ckpt")
    (tmp_path / "last.ckpt").symlink_to("epoch=0.ckpt")  # ModelCheckpoint(save_last="link")

    entry = io.load_checkpoint(tmp_path / "last.ckpt")["callbacks"][STATE_KEY]

    assert entry["ranks"].folder.startswith(str(tmp_path / "epoch=0.ckpt.ranks"))
