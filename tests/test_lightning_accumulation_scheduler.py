"""Lightning's ``GradientAccumulationScheduler`` sets ``accumulate_grad_batches`` in ``on_train_epoch_start``, which
Lightning does not run when it resumes inside an epoch: a mid-epoch checkpoint warns that the resumed epoch steps
after every batch (Lightning's behaviour, with or without the tracker)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

pytest.importorskip("pytorch_lightning")

import pytorch_lightning as pl
import torch

from tracker_core import InexactResumeWarning
from tracker_core.integrations.lightning import ProgressTracker

from helpers.lightning_program import Recording, SaveAndStop, Stop, loader, trainer


# global_step 5: epoch 1 (accumulating 2), after its batch 1; 2: epoch 0 (accumulating 1), after its batch 1
@pytest.mark.parametrize(("global_step", "warns"), [(5, True), (2, False)], ids=["accumulating-2", "accumulating-1"])
def test_a_mid_epoch_checkpoint_with_a_gradient_accumulation_scheduler_warns_where_it_accumulates(
    global_step: int, warns: bool, tmp_path: Path
) -> None:
    torch.manual_seed(0)
    scheduler = pl.callbacks.GradientAccumulationScheduler({0: 1, 1: 2})  # 4 steps in epoch 0 (4 batches), then 2
    fit = trainer([ProgressTracker(), scheduler, SaveAndStop(tmp_path / "mid.ckpt", global_step)], max_epochs=2)
    context = (
        pytest.warns(InexactResumeWarning, match="GradientAccumulationScheduler") if warns else contextlib.nullcontext()
    )
    with context, contextlib.suppress(Stop):
        fit.fit(Recording(), loader())
    assert fit.current_epoch == (1 if warns else 0)
