"""Checkpoint a Lightning run mid-epoch, resume it with a new Trainer, model and loader, get the same weights.

Run: .venv/bin/python examples/lightning_resume.py
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

import tracker_core
from tracker_core.integrations.lightning import ProgressTracker


class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


class StopAfterCheckpoint(pl.Callback):
    """Saves at the end of train batch ``at`` (over the run), then stops: the "killed" process."""

    def __init__(self, at: int, path: Path) -> None:
        self.at, self.path = at, path

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.fit_loop.total_batch_idx == self.at:
            trainer.save_checkpoint(self.path)
            trainer.should_stop = True


def make(seed: int, *callbacks: pl.Callback) -> tuple[pl.Trainer, Regression, DataLoader[Any]]:
    """What every training process builds; ``seed`` differs between processes on purpose."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(0)  # the data are the same in every process
    data = TensorDataset(torch.randn(22, 4, generator=g), torch.randn(22, 1, generator=g))
    trainer = pl.Trainer(
        accelerator="cpu", max_epochs=3, accumulate_grad_batches=2, callbacks=[ProgressTracker(), *callbacks],
        enable_progress_bar=False, logger=False, enable_model_summary=False, enable_checkpointing=False,
    )  # fmt: skip
    return trainer, Regression(), StatefulDataLoader(data, batch_size=4, shuffle=True)  # resumes at its batch


def main() -> None:
    warnings.filterwarnings("ignore")
    path = Path(tempfile.mkdtemp()) / "mid.ckpt"
    trainer, model, loader = make(0)
    trainer.fit(model, loader)
    straight = [p.detach().clone() for p in model.parameters()]

    trainer, model, loader = make(0, StopAfterCheckpoint(8, path))  # epoch 2, batch 3: mid-window
    trainer.fit(model, loader)
    entry = torch.load(path, weights_only=True)["callbacks"]["ProgressTracker"]["progress"]
    print(
        f"checkpoint: {entry['stages']['train']['batches']['epoch']['processed']} batches into epoch index "
        f"{entry['stages']['train']['epochs']['run']['completed']}, inside an accumulation window"
    )

    trainer, model, loader = make(1)  # "a new process"
    trainer.fit(model, loader, ckpt_path=path)
    view = tracker_core.get_progress(trainer)
    same = all(torch.equal(a, b) for a, b in zip(model.parameters(), straight))
    print(
        f"finished: {view.epoch_index} epochs, {view.train.batches.run.completed} batches, "
        f"{view.global_step} optimizer steps (Lightning: {trainer.global_step}); "
        f"weights equal to the uninterrupted run: {same}"
    )


if __name__ == "__main__":
    main()
