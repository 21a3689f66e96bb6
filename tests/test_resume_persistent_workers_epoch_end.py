"""A StatefulDataLoader with persistent workers, saved at an epoch's end once its workers started.

Its workers keep their seeds and their iterator across epochs: torchdata resets that iterator for the next epoch,
drawing its order once from the sampler's generator, where a resumed process builds a new iterator, which draws it
twice (torch's iterator draws at its build and again at its first reset), and new workers with new seeds. Where the
next epoch starts from such a new iterator (a save between epochs, or at an epoch's last batch whose state the
framework restores: Lightning, Accelerate), the save and the resume warn ``InexactResumeWarning``, as for a plain
DataLoader with persistent workers. Where the position restores the epoch's end from the loader's own state (Ignite's
last ITERATION_COMPLETED), the resume is exact and nothing warns; without persistent workers every such resume is
exact (tests/test_ignite_resume.py, tests/test_lightning_resume.py).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torchdata")
pytest.importorskip("ignite")
pytest.importorskip("pytorch_lightning")

import pytorch_lightning as pl
import torch
from ignite.engine import Events
from ignite.handlers import Checkpoint, DiskSaver
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import InexactResumeWarning
from tracker_core.integrations.lightning import ProgressTracker

from helpers import ignite_program
from helpers.lightning_program import Indexed, Recording, trainer, weights
from helpers.loader_workers import end_workers

pytestmark = [
    pytest.mark.filterwarnings("ignore:'set_vital' is deprecated"),
    pytest.mark.filterwarnings("ignore:.*does not have many workers"),
]

SAVED = "with persistent workers started: they keep their seeds and their iterator across epochs"


def _persistent(dataset: Any) -> StatefulDataLoader[Any]:
    return StatefulDataLoader(dataset, batch_size=3, shuffle=True, num_workers=2, persistent_workers=True)


# --- Ignite: the position saves and restores the loader's own state ------------------------


def _ignite(seed: int, folder: Path | None = None, event: Any = None) -> ignite_program.Program:
    program = ignite_program.build(ignite_program.Config(stateful=True), seed=seed)
    program.loader = _persistent(ignite_program.Indexed(ignite_program.TRAIN_SIZE))
    if folder is not None:
        checkpoint = Checkpoint(program.to_save(), DiskSaver(str(folder)), filename_pattern="{name}.pt")
        program.trainer.add_event_handler(event, checkpoint)
    return program


def _ignite_resumed(folder: Path) -> ignite_program.Program:
    program = _ignite(seed=1234)
    Checkpoint.load_objects(program.to_save(), str(folder / "checkpoint.pt"))
    program.run()
    return program


def test_ignite_epoch_completed_save_of_persistent_workers_warns_at_the_save_and_at_the_resume(tmp_path: Path) -> None:
    reference = _ignite(seed=0, folder=tmp_path, event=Events.EPOCH_COMPLETED(once=1))
    with pytest.warns(InexactResumeWarning, match=f"^saving StatefulDataLoader .* {SAVED}"):
        reference.run()
    with pytest.warns(InexactResumeWarning, match=f"^resuming from a save of StatefulDataLoader .* {SAVED}"):
        resumed = _ignite_resumed(tmp_path)
    end_workers(reference.loader, resumed.loader)
    assert resumed.seen != reference.seen[4:]  # new workers draw the next epoch's order again, as warned


@pytest.mark.filterwarnings("error::tracker_core.InexactResumeWarning")
def test_ignite_save_of_persistent_workers_at_an_epochs_last_iteration_resumes_exactly(tmp_path: Path) -> None:
    reference = _ignite(seed=0, folder=tmp_path, event=Events.ITERATION_COMPLETED(once=4))
    reference.run()
    resumed = _ignite_resumed(tmp_path)
    end_workers(reference.loader, resumed.loader)
    assert resumed.seen == reference.seen[4:]
    assert all(torch.equal(a, b) for a, b in zip(resumed.weights().values(), reference.weights().values()))


# --- Lightning: the framework restores the loader's own state, mid-epoch only --------------


class _SaveFirstEpochEnd(pl.Callback):
    """Saves at the end of the first epoch: in ``on_train_epoch_end``, or after its last batch."""

    def __init__(self, path: Path, hook: str) -> None:
        self.path, self.hook = path, hook

    def on_train_batch_end(self, trainer: pl.Trainer, module: Any, outputs: Any, batch: Any, index: int) -> None:
        if self.hook == "on_train_batch_end" and trainer.current_epoch == 0 and index == 3:
            trainer.save_checkpoint(self.path)

    def on_train_epoch_end(self, trainer: pl.Trainer, module: Any) -> None:
        if self.hook == "on_train_epoch_end" and trainer.current_epoch == 0:
            trainer.save_checkpoint(self.path)


def _lightning(callbacks: list[pl.Callback], checkpoint: Path | None = None) -> Recording:
    torch.manual_seed(0)
    model, loader = Recording(), _persistent(Indexed())
    trainer([ProgressTracker(), *callbacks], max_epochs=3).fit(model, loader, ckpt_path=checkpoint)
    end_workers(loader)  # persistent workers: ended now, not by a later test's garbage collection (5 s each)
    return model


@pytest.mark.parametrize("hook", ["on_train_epoch_end", "on_train_batch_end"])
def test_lightning_epoch_end_save_of_persistent_workers_warns_at_the_save_and_at_the_resume(
    hook: str, tmp_path: Path
) -> None:
    path = tmp_path / "end.ckpt"
    with pytest.warns(InexactResumeWarning, match=f"^saving StatefulDataLoader .* {SAVED}"):
        reference = _lightning([_SaveFirstEpochEnd(path, hook)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed = _lightning([], checkpoint=path)
    inexact = [str(w.message) for w in caught if issubclass(w.category, InexactResumeWarning)]
    assert [m for m in inexact if m.startswith("resuming from a save of StatefulDataLoader") and SAVED in m]
    assert resumed.seen != reference.seen[4:]  # new workers draw the next epoch's order again, as warned
    assert not all(torch.equal(a, b) for a, b in zip(weights(resumed), weights(reference)))
