"""The Lightning run of ``helpers.logger_runs``: a fit logging every step into real Lightning loggers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch

from tracker_core.integrations.lightning import ProgressTracker

from helpers.logger_runs import CHECKPOINT_EVERY, EPOCHS, _die, _loader


class _Logging(pl.LightningModule):
    def __init__(self, process: int) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.process = process

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("loss", loss)
        self.log("process", float(self.process))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _KillAt(pl.Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            _die()


def logger(kind: str, folder: Path, version: int | None) -> Any:
    """A Lightning ``TensorBoardLogger`` or ``CSVLogger`` (``kind``) writing under ``folder/run``."""
    if kind == "tensorboard":
        return pl.loggers.TensorBoardLogger(folder, name="run", version=version)
    return pl.loggers.CSVLogger(folder, name="run", version=version)


def fit(loggers: list[Any], process: int, kill_at: int | None = None, ckpt_path: str | None = None) -> None:
    """Fit 5 epochs of 4 batches, logging every step, a checkpoint every 6 steps into the first logger's folder."""
    torch.manual_seed(0)
    callbacks: list[pl.Callback] = [
        ProgressTracker(),
        pl.callbacks.ModelCheckpoint(every_n_train_steps=CHECKPOINT_EVERY, save_top_k=-1),
    ]
    if kill_at is not None:
        callbacks.append(_KillAt(kill_at))
    trainer = pl.Trainer(
        max_epochs=EPOCHS,
        logger=loggers,
        callbacks=callbacks,
        log_every_n_steps=1,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        accelerator="cpu",
    )
    trainer.fit(_Logging(process), _loader(), ckpt_path=ckpt_path)


def checkpoint_at(folder: Path, step: int, version: int = 0) -> str:
    """The Lightning checkpoint saved at global step ``step`` in ``folder/run/version_<version>``."""
    (found,) = (folder / "run" / f"version_{version}" / "checkpoints").glob(f"*step={step}.ckpt")
    return str(found)
