"""Lightning resumes inside an epoch without its ``on_train_epoch_start`` hooks, and does not step a
``ReduceLROnPlateau`` at the end of that epoch: a mid-epoch checkpoint with a callback acting there
(``GradientAccumulationScheduler`` where it accumulates, ``BaseFinetuning``) or such a scheduler warns (Lightning's
behaviour, with or without the tracker)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")

import pytorch_lightning as pl
import torch

from tracker_core import InexactResumeWarning
from tracker_core.integrations.lightning import ProgressTracker

from helpers.lightning_program import Recording, SaveAndStop, Stop, loader, trainer


def _save_at(global_step: int, path: Path, *callbacks: Any, module: Recording | None = None) -> pl.Trainer:
    torch.manual_seed(0)
    fit = trainer([ProgressTracker(), *callbacks, SaveAndStop(path, global_step)], max_epochs=2)
    with contextlib.suppress(Stop):
        fit.fit(module or Recording(), loader())
    return fit


# global_step 5: epoch 1 (accumulating 2), after its batch 1; 2: epoch 0 (accumulating 1), after its batch 1
@pytest.mark.parametrize(("global_step", "warns"), [(5, True), (2, False)], ids=["accumulating-2", "accumulating-1"])
def test_a_mid_epoch_checkpoint_with_a_gradient_accumulation_scheduler_warns_where_it_accumulates(
    global_step: int, warns: bool, tmp_path: Path
) -> None:
    scheduler = pl.callbacks.GradientAccumulationScheduler({0: 1, 1: 2})  # 4 steps in epoch 0 (4 batches), then 2
    expected = "GradientAccumulationScheduler, which acts in on_train_epoch_start"
    with pytest.warns(InexactResumeWarning, match=expected) if warns else contextlib.nullcontext():
        fit = _save_at(global_step, tmp_path / "mid.ckpt", scheduler)
    assert fit.current_epoch == (1 if warns else 0)


class _Finetuned(Recording):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = self.layer  # BackboneFinetuning freezes and unfreezes the module's backbone


def test_a_mid_epoch_checkpoint_with_a_finetuning_callback_warns(tmp_path: Path) -> None:
    finetuning = pl.callbacks.BackboneFinetuning(unfreeze_backbone_at_epoch=1)
    with pytest.warns(InexactResumeWarning, match="BackboneFinetuning, which acts in on_train_epoch_start"):
        _save_at(2, tmp_path / "mid.ckpt", finetuning, module=_Finetuned())


class _Plateau(Recording):
    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": plateau, "monitor": "loss", "interval": "epoch"}}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
        loss = super().training_step(batch, batch_idx)
        self.log("loss", loss)  # type: ignore[arg-type]
        return loss


def test_a_mid_epoch_checkpoint_with_a_plateau_scheduler_stepped_at_epoch_ends_warns(tmp_path: Path) -> None:
    with pytest.warns(InexactResumeWarning, match="ReduceLROnPlateau stepped at each epoch's end"):
        _save_at(2, tmp_path / "mid.ckpt", module=_Plateau())
