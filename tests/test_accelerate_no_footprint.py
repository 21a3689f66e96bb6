"""AcceleratorProgress writes nothing into the folders Accelerate writes into but its own progress entry files.

The same program (two epochs, ``save_state`` at two batches, then a fresh Accelerator that loads the last
checkpoint, trains the third epoch and saves again) runs with and without the tracker; every file and folder under
``project_dir`` is listed. With the tracker the list is Accelerate's own plus, in each save folder,
``progress_tracker_0.pt`` and the ``custom_checkpoint_0.pkl`` Accelerate writes for the registered progress
(``register_for_checkpointing``: its note), with Accelerate's automatic naming and with a folder the program names.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

pytest.importorskip("accelerate")

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import ProjectConfiguration
from torch.utils.data import DataLoader, TensorDataset

from tracker_core.integrations.accelerate import AcceleratorProgress


def _train(project_dir: Path, automatic: bool, tracked: bool, resume_from: str | None) -> list[str]:
    """Train 2 epochs of 4 batches saving after batches 2 and 8, or load ``resume_from`` (saved after batch 8) and
    train the third epoch saving after its last batch; the folders saved."""
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    config = ProjectConfiguration(str(project_dir), automatic_checkpoint_naming=automatic)
    accelerator = Accelerator(cpu=True, project_config=config)
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2, shuffle=True)
    model, optimizer, data = accelerator.prepare(model, optimizer, data)
    progress = AcceleratorProgress(accelerator) if tracked else None
    if progress is not None:
        accelerator.register_for_checkpointing(progress)
    if resume_from is not None:
        accelerator.load_state(resume_from)
        # Accelerate's load_state does not restore it (its error says to set it)
        accelerator.project_configuration.iteration = 2 if progress is None else progress.next_save_iteration
    saves, first_epoch, max_epochs = ((2, 8), 0, 2) if resume_from is None else ((4,), 2, 3)
    batch, saved = 0, []
    with contextlib.nullcontext() if progress is None else progress.fit(max_epochs) as fit:
        for _ in range(first_epoch, max_epochs) if fit is None else fit.epochs():
            for x, y in data if fit is None else fit.train(data):
                optimizer.zero_grad()
                accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                optimizer.step()
                batch += 1
                if batch in saves:
                    saved.append(accelerator.save_state(None if automatic else str(project_dir / f"step_{batch}")))
    return saved


def _names_left(project_dir: Path, automatic: bool, tracked: bool) -> tuple[set[str], list[str]]:
    """Every file and folder under ``project_dir`` relative to it, and the save folders, after both processes."""
    first = _train(project_dir, automatic, tracked, resume_from=None)
    second = _train(project_dir, automatic, tracked, resume_from=first[-1])
    names = {str(path.relative_to(project_dir)) for path in project_dir.rglob("*")}
    return names, [str(Path(folder).relative_to(project_dir)) for folder in first + second]


@pytest.mark.parametrize("automatic", [True, False], ids=["automatic-naming", "named-folders"])
def test_the_only_names_accelerate_would_not_write_are_the_progress_file_and_its_note_in_each_save_folder(
    automatic: bool, tmp_path: Path
) -> None:
    names, folders = _names_left(tmp_path / "tracked", automatic, tracked=True)
    accelerate_alone, same_folders = _names_left(tmp_path / "alone", automatic, tracked=False)
    assert folders == same_folders and len(folders) == 3
    ours = ("progress_tracker_0.pt", "custom_checkpoint_0.pkl")
    assert names - accelerate_alone == {f"{folder}/{name}" for folder in folders for name in ours}
    assert accelerate_alone <= names


def test_load_state_leaves_the_project_configuration_alone_and_names_the_next_save_iteration(tmp_path: Path) -> None:
    (saved,) = _train(tmp_path, automatic=True, tracked=True, resume_from=None)[-1:]
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    accelerator = Accelerator(
        cpu=True, project_config=ProjectConfiguration(str(tmp_path), automatic_checkpoint_naming=True)
    )
    accelerator.prepare(torch.nn.Linear(2, 1))  # the saved gradients need its parameter
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    assert progress.next_save_iteration is None
    accelerator.load_state(saved)
    assert (accelerator.project_configuration.iteration, progress.next_save_iteration) == (0, 2)
