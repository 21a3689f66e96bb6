"""An Accelerate ``save_state`` folder is committed by the tracker: rank 0's progress file, written last in the
same ``save_state`` (the registered progress's ``state_dict()``), lists every other file with its size and CRC-32.
A folder whose save ended before its commit, or that mixes two saves, is refused by ``load_state`` before
anything is loaded; files added after the commit are not checked. A progress not registered writes its files as
before, with no commit, and its folders load as they did."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("accelerate")

import torch

from tracker_core import ProgressStateError
from tracker_core.checkpoints import CheckpointFileError, read_checkpoint
from tracker_core.integrations.accelerate import AcceleratorProgress

from helpers.accelerate_drive import Setup, StopAt, run
from helpers.saved_checkpoints import two_rank_accelerate_folder

MID_EPOCH_EXACT = Setup(stateful=True, torchdata=True)  # a StatefulDataLoader: a mid-epoch save resumes at its batch


class Interrupted(Exception):
    """Stands for a kill: raised by an object registered before the progress, after Accelerate's own files."""


class StopsTheSave:
    """Registered before the progress: its ``state_dict()`` ends the ``save_state`` before the commit when armed."""

    def __init__(self) -> None:
        self.armed = False

    def state_dict(self) -> dict[str, int]:
        if self.armed:
            raise Interrupted
        return {}

    def load_state_dict(self, state: object) -> None:
        pass


def _registered_run(folder: Path) -> tuple[Any, AcceleratorProgress, torch.nn.Module]:
    """A prepared Accelerator with a registered object and then the registered progress: batch 0 trained and
    saved into ``folder``, then batch 1 trained and saved into it until the save ends before its commit."""
    from torch.utils.data import DataLoader, TensorDataset

    from helpers.accelerate_drive import fresh_accelerator

    torch.manual_seed(0)
    accelerator = fresh_accelerator(Setup(accumulation=1))
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.linspace(-1, 1, 40).reshape(10, 4)
    loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=3, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    stopper = StopsTheSave()
    accelerator.register_for_checkpointing(stopper)
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    progress.track_train_loader(loader)

    def two_saves() -> None:
        with progress.fit(1) as fit:
            for _epoch in fit.epochs():
                for index, (inputs, targets) in enumerate(progress.train(loader)):
                    accelerator.backward(torch.nn.functional.mse_loss(model(inputs), targets))
                    optimizer.step()
                    optimizer.zero_grad()
                    if index == 0:
                        accelerator.save_state(str(folder))
                        continue
                    stopper.armed = True
                    with pytest.raises(Interrupted):
                        accelerator.save_state(str(folder))  # its files written, its commit never
                    break

    two_saves()
    return accelerator, progress, model


def _assert_refused_changing_nothing(accelerator: Any, progress: AcceleratorProgress, model: Any, folder: Path) -> str:
    before = (progress.view.state_dict(), [p.detach().clone() for p in model.parameters()], torch.get_rng_state())
    with pytest.raises((ProgressStateError, FileNotFoundError)) as error:
        accelerator.load_state(str(folder))
    assert progress.view.state_dict() == before[0]
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), before[1], strict=True))
    assert torch.equal(torch.get_rng_state(), before[2])
    return str(error.value)


def test_rank_0s_progress_file_lists_every_other_file_of_the_folder_with_its_size(tmp_path: Path) -> None:
    run(Setup(), stop=StopAt(4), save_dir=str(tmp_path))
    saved = torch.load(tmp_path / "progress_tracker_0.pt", weights_only=True)
    listed = saved["folder"]
    # custom_checkpoint_0.pkl: the registered progress's note, which Accelerate writes after the commit
    assert set(listed) == set(os.listdir(tmp_path)) - {"progress_tracker_0.pt", "custom_checkpoint_0.pkl"}
    assert all(record["size"] == (tmp_path / name).stat().st_size for name, record in listed.items())
    assert saved["version"] == 5 and saved["rank"] == 0 and saved["world_size"] == 1


def test_a_save_ended_before_its_commit_in_a_folder_holding_an_older_save_is_refused_changing_nothing(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "checkpoint"
    accelerator, progress, model = _registered_run(folder)
    message = _assert_refused_changing_nothing(accelerator, progress, model, folder)
    assert "parts of this folder come from different saves" in message and "nothing was loaded" in message
    with pytest.raises(CheckpointFileError, match="different saves"):
        read_checkpoint(folder)


def test_a_save_ended_before_its_commit_in_a_new_folder_is_refused_changing_nothing(tmp_path: Path) -> None:
    accelerator, progress, model = _registered_run(tmp_path / "first")
    with pytest.raises(Interrupted):
        accelerator.save_state(str(tmp_path / "new"))
    message = _assert_refused_changing_nothing(accelerator, progress, model, tmp_path / "new")
    assert "was cut short before a registered AcceleratorProgress wrote it" in message


def test_an_intact_folder_with_a_file_added_after_the_commit_loads_and_the_file_is_named_not_checked(
    tmp_path: Path,
) -> None:
    run(MID_EPOCH_EXACT, stop=StopAt(4), save_dir=str(tmp_path / "saved"))
    (tmp_path / "saved" / "notes.txt").write_text("written after the save")
    found = read_checkpoint(tmp_path / "saved")
    assert [part.split(" ")[0] for part in found.unchecked] == ["custom_checkpoint_0.pkl", "notes.txt"]
    resumed = run(MID_EPOCH_EXACT, load_dir=str(tmp_path / "saved"))
    assert resumed.state == run(MID_EPOCH_EXACT).state


def test_an_unregistered_progress_writes_its_file_without_a_commit_and_the_resume_stays_exact(tmp_path: Path) -> None:
    reference = run(MID_EPOCH_EXACT)
    stopped = run(MID_EPOCH_EXACT, stop=StopAt(4), save_dir=str(tmp_path), registered=False)
    saved = torch.load(tmp_path / "progress_tracker_0.pt", weights_only=True)
    assert saved["folder"] is None and not (tmp_path / "custom_checkpoint_0.pkl").exists()
    assert read_checkpoint(tmp_path).unchecked[0].startswith("Accelerate's files (the folder has no commit")
    resumed = run(MID_EPOCH_EXACT, load_dir=str(tmp_path), registered=False)
    assert stopped.train_ids + resumed.train_ids == reference.train_ids
    assert all(torch.equal(a, b) for a, b in zip(resumed.weights, reference.weights, strict=True))
    assert resumed.state == reference.state


def test_an_uncommitted_folder_whose_rank_files_come_from_two_saves_is_refused(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(two_rank_accelerate_folder(tmp_path_factory), copy)
    first = torch.load(copy / "progress_tracker_0.pt", weights_only=True)
    torch.save({**first, "folder": None, "save_iteration": 7}, copy / "progress_tracker_0.pt")  # as unregistered
    with pytest.raises(CheckpointFileError, match=r"progress_tracker_1\.pt was written by save 0 of 2"):
        read_checkpoint(copy)


def test_a_two_process_save_is_committed_by_rank_0_listing_rank_1s_files(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    folder = two_rank_accelerate_folder(tmp_path_factory)
    listed = torch.load(folder / "progress_tracker_0.pt", weights_only=True)["folder"]
    assert {"progress_tracker_1.pt", "random_states_1.pkl"} <= set(listed)
    assert len(read_checkpoint(folder).entries) == 2
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    (copy / "random_states_1.pkl").write_bytes((copy / "random_states_0.pkl").read_bytes())
    with pytest.raises(CheckpointFileError, match=r"random_states_1\.pkl"):
        read_checkpoint(copy)


def test_save_state_on_the_main_process_only_returns_warns_and_leaves_a_folder_load_state_refuses(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """No barrier: rank 0 waits for rank 1's progress file a bounded time (1 s here), commits without it, warns."""
    folder = two_rank_accelerate_folder(tmp_path_factory, main_only=True)
    warned = Path(f"{folder}.warnings").read_text()
    assert "progress file of rank(s) [1] did not come within 1 s (save_state called on the main process only" in warned
    assert not (folder / "progress_tracker_1.pt").exists()
    from helpers.accelerate_drive import fresh_accelerator

    accelerator = fresh_accelerator(Setup())
    model = accelerator.prepare(torch.nn.Linear(4, 1))
    progress = AcceleratorProgress(accelerator)
    message = _assert_refused_changing_nothing(accelerator, progress, model, folder)
    assert "lists no progress_tracker_1.pt: that process had not finished this save_state" in message
