"""The Lightning adapter's checkpoint IO (``integrations/lightning/_checkpoint_io.py``) around Lightning's own
``TorchCheckpointIO``, in place only with ``ProgressTracker(rank_files=True)``: a gathered entry is split into
rank files on save, joined on load, and the rank files go with the checkpoint when Lightning removes it
(``ModelCheckpoint(save_top_k=...)``); a checkpoint with rank files is refused without ``rank_files=True``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")

import torch
from lightning_fabric.plugins import TorchCheckpointIO
from pytorch_lightning.plugins.io import AsyncCheckpointIO

from tracker_core import ProgressStateError, Tracker, comparable_state, get_progress
from tracker_core.adapter import RankFiles, RankTensors
from tracker_core.integrations.lightning import GRADIENTS_KEY, STATE_KEY, ProgressTracker
from tracker_core.integrations.lightning._checkpoint_io import RankFilesIO

from helpers.lightning_program import Recording, loader, trainer


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


@pytest.mark.parametrize("rank_files", [False, True])
def test_the_strategys_checkpoint_io_is_wrapped_only_with_rank_files(rank_files: bool) -> None:
    fit = trainer([ProgressTracker(rank_files=rank_files)], max_epochs=1)
    fit.fit(Recording(), loader())

    assert isinstance(fit.strategy.checkpoint_io, RankFilesIO) is rank_files


def _rank_files_checkpoint(folder: Path) -> Path:
    """A real single-process fit checkpoint whose entry is made a 2-rank one, saved with rank files."""
    fit = trainer([ProgressTracker()], max_epochs=1)
    fit.fit(Recording(), loader())
    fit.save_checkpoint(folder / "single.ckpt")
    checkpoint = torch.load(folder / "single.ckpt", weights_only=True)
    entry = checkpoint["callbacks"][STATE_KEY]
    checkpoint["callbacks"][STATE_KEY] = {**entry, "ranks": [entry, entry]}
    RankFilesIO(TorchCheckpointIO()).save_checkpoint(checkpoint, folder / "ranks.ckpt")
    return folder / "ranks.ckpt"


def test_a_checkpoint_with_rank_files_resumed_without_rank_files_is_refused_and_loads_nothing(tmp_path: Path) -> None:
    path = _rank_files_checkpoint(tmp_path)
    tracker = ProgressTracker()
    resumed = trainer([tracker], max_epochs=2)

    with pytest.raises(ProgressStateError, match=r"'ranks'.*ProgressTracker\(rank_files=True\)") as raised:
        resumed.fit(Recording(), loader(), ckpt_path=path)

    assert raised.value.key == "ranks"
    assert get_progress(resumed).train.batches.lifetime.completed == 0
    assert comparable_state(tracker.tracker.progress.state_dict()) == comparable_state(
        ProgressTracker().tracker.progress.state_dict()
    )
