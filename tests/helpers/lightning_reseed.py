"""A small Lightning fit (either package) that saves and stops at a train batch, and resumes with an optional reseed.

10 shuffled samples in batches of 3 (4 batches an epoch), 2 epochs; the loss draws noise from
the global RNG, so any change of the RNGs changes the weights.
"""

from __future__ import annotations

import contextlib
import importlib
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from tracker_core.integrations.lightning import ProgressTracker

from helpers.lightning_program import Indexed

BATCHES = 4  # an epoch: 3, 3, 3, 1 samples


class Stop(Exception):
    """Ends the first fit right after its checkpoint (stands in for the process dying)."""


def _reseed() -> None:
    torch.manual_seed(0)  # what seed_everything(0) does to torch's generator


def fit(
    package: str, path: Path, save_at: int | None = None, reseed: str = "", draw_before: bool = False
) -> list[torch.Tensor]:
    """Fit, saving to ``path`` at the end of train batch ``save_at`` (0-based over the run) and stopping
    there; without ``save_at``, resume from ``path`` if it exists. ``reseed``: ``"module.<hook>"`` or
    ``"callback.<hook>"`` reseeds the global RNG in that hook. ``draw_before``: a callback listed before
    the tracker draws from the global RNG at every ``on_train_batch_start`` (in every run). Returns the
    final weights."""
    pl = importlib.import_module(package)
    reseed_owner, _, reseed_hook = reseed.partition(".")

    class Model(pl.LightningModule):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y, _ = batch
            return torch.nn.functional.mse_loss(self.layer(x + 0.01 * torch.randn_like(x)), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class Saver(pl.Callback):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            self.batches = 0

        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            if self.batches == save_at:
                trainer.save_checkpoint(path)
                raise Stop
            self.batches += 1

    class Reseeder(pl.Callback):  # type: ignore[misc,name-defined]
        pass

    class Drawer(pl.Callback):  # type: ignore[misc,name-defined]
        def on_train_batch_start(self, *args: Any) -> None:
            torch.rand(1)

    if reseed_owner:
        setattr(Model if reseed_owner == "module" else Reseeder, reseed_hook, lambda *args: _reseed())
    torch.manual_seed(0 if save_at is not None or not path.exists() else 1234)
    model = Model()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=2,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        callbacks=[*([Drawer()] if draw_before else []), ProgressTracker(), Saver(), Reseeder()],
    )
    resume = save_at is None and path.exists()
    with contextlib.suppress(Stop):
        trainer.fit(model, DataLoader(Indexed(), batch_size=3, shuffle=True), ckpt_path=path if resume else None)
    return [p.detach().clone() for p in model.parameters()]
