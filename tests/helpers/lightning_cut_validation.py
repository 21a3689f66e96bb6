"""A Lightning fit (either package) whose checkpoint is taken inside a validation batch, then resumed.

10 shuffled samples in batches of 3 (4 train batches an epoch) from a torchdata ``StatefulDataLoader`` (the cuts
are inside a train epoch: a plain ``DataLoader`` would resume that epoch from its first batch), 2 epochs, a
validation every 2 train batches over one or more unshuffled plain loaders without a ``generator`` (each iterator
Lightning builds draws its base seed from torch's global RNG), and a model with dropout, so any change of torch's
RNG changes the weights. ``fit(..., save_at=k)`` saves inside validation batch ``k`` (counted over the run, all
loaders) and stops there, as a process killed then (or ``OnExceptionCheckpoint``) would; ``fit(...)``
without it resumes from ``path`` if it exists.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core.integrations.lightning import ProgressTracker

from helpers.lightning_program import Indexed
from helpers.loader_workers import end_stopped_fit


class Stop(Exception):
    """Ends the first fit right after its checkpoint."""


@dataclasses.dataclass
class Outcome:
    train_seen: list[list[int]]  # sample ids of each train step
    val_seen: list[tuple[int, int, list[int]]]  # (dataloader_idx, batch_idx, sample ids) of each validation step
    weights: list[torch.Tensor]
    progress: dict[str, Any]
    rng: torch.Tensor  # torch's global RNG state at the fit's end


def fit(
    package: str,
    path: Path,
    save_at: int | None = None,
    *,
    workers: int = 0,
    val_sizes: tuple[int, ...] = (7,),
    sanity_steps: int = 0,
    fetch_in_step: bool = False,
) -> Outcome:
    """Fit, or resume from ``path`` (see the module); ``workers`` loader workers for every loader; one validation
    loader per size in ``val_sizes`` (batches of 3); ``sanity_steps``: Lightning's sanity-check batches;
    ``fetch_in_step``: ``validation_step(dataloader_iter)`` fetches its batches."""
    pl = importlib.import_module(package)
    train_seen: list[list[int]] = []
    val_seen: list[tuple[int, int, list[int]]] = []
    steps = 0

    class Model(pl.LightningModule):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.hidden = torch.nn.Linear(4, 8)
            self.dropout = torch.nn.Dropout(0.5)
            self.out = torch.nn.Linear(8, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(self.dropout(self.hidden(x)))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y, ids = batch
            train_seen.append([int(i) for i in ids])
            return torch.nn.functional.mse_loss(self(x), y)

        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self.validate(batch, batch_idx, dataloader_idx)

        def validate(self, batch: Any, batch_idx: int, dataloader_idx: int) -> None:
            nonlocal steps
            if self.trainer.sanity_checking:
                return
            if save_at is not None and steps == save_at:
                self.trainer.save_checkpoint(path)
                raise Stop
            steps += 1
            x, y, ids = batch
            val_seen.append((dataloader_idx, batch_idx, [int(i) for i in ids]))
            self.log("val_loss", torch.nn.functional.mse_loss(self(x), y))

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class FetchingModel(Model):
        def validation_step(self, dataloader_iter: Any) -> None:  # type: ignore[override]
            batch, batch_idx, dataloader_idx = next(dataloader_iter)
            self.validate(batch, batch_idx, dataloader_idx)

    resume = save_at is None and path.exists()
    torch.manual_seed(1234 if resume else 0)  # the resumed run's RNGs come from the checkpoint
    model = FetchingModel() if fetch_in_step else Model()
    tracker = ProgressTracker()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=2,
        val_check_interval=2,
        num_sanity_val_steps=sanity_steps,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        callbacks=[tracker],
    )
    extra: dict[str, Any] = {"num_workers": workers}
    if workers:
        extra["multiprocessing_context"] = "fork"
    train = StatefulDataLoader(Indexed(), batch_size=3, shuffle=True, **extra)
    validation = [DataLoader(Indexed(n), batch_size=3, **extra) for n in val_sizes]
    with contextlib.suppress(Stop):
        trainer.fit(model, train, validation, ckpt_path=path if resume else None)
    end_stopped_fit(trainer)
    return Outcome(
        train_seen,
        val_seen,
        [p.detach().clone() for p in model.parameters()],
        tracker.tracker.view.state_dict(),
        torch.get_rng_state(),
    )
