"""Shared pieces of the Lightning adapter tests: tiny data that names its samples, a model that records them."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset


class Indexed(Dataset):
    """``n`` samples ``(x, y, index)``."""

    def __init__(self, n: int = 10) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        return torch.full((4,), float(i)) / 10, torch.tensor([float(i % 3)]), i


class IndexedStream(IterableDataset):
    """An iterable of ``n`` samples like :class:`Indexed`, in a fixed order."""

    def __init__(self, n: int = 10) -> None:
        self.n = n

    def __iter__(self):  # type: ignore[no-untyped-def]
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for i in range(start, self.n, step):
            yield Indexed(self.n)[i]


class Recording(pl.LightningModule):
    """Linear(4, 1); records the sample ids each step saw; its loss draws noise from the global RNG."""

    def __init__(self, manual: bool = False, noisy: bool = True) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.second = torch.nn.Linear(1, 1)
        self.automatic_optimization = not manual
        self.noisy = noisy
        self.seen: list[list[int]] = []
        self.stop_at: int | None = None  # batch_idx at which on_train_batch_start returns -1 (first epoch)

    def loss(self, batch: Any, noisy: bool = True) -> torch.Tensor:
        x, y, _ = batch
        if noisy and self.noisy:
            x = x + 0.01 * torch.randn_like(x)
        return torch.nn.functional.mse_loss(self.second(self.layer(x)), y)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
        self.seen.append([int(i) for i in batch[2]])
        if self.automatic_optimization:
            return self.loss(batch)
        first, second = self.optimizers()  # type: ignore[misc]
        loss = self.loss(batch)
        first.zero_grad()
        second.zero_grad()
        self.manual_backward(loss)
        first.step()
        if batch_idx % 2 == 1:
            second.step()
        return None

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
        return -1 if batch_idx == self.stop_at and self.current_epoch == 0 else None

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.loss(batch, noisy=False)

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.loss(batch)

    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        return self.layer(batch[0])

    def configure_optimizers(self) -> Any:
        if self.automatic_optimization:
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        return [torch.optim.SGD(self.layer.parameters(), lr=0.1), torch.optim.SGD(self.second.parameters(), lr=0.1)]


class Paired(Recording):
    """Trains on two train loaders at once: each step sees a batch of each (``fit(model, [a, b])``)."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
        return self.loss(batch[0]) + self.loss(batch[1])


class Crashing(Recording):
    """Raises ``RuntimeError("crash")`` in the training step of global batch ``crash_at`` (0-based), before its step."""

    def __init__(self, crash_at: int | None) -> None:
        super().__init__()
        self.crash_at = crash_at
        self.batches = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
        if self.batches == self.crash_at:
            raise RuntimeError("crash")
        self.batches += 1
        return super().training_step(batch, batch_idx)


def loader(n: int = 10, batch: int = 3, **kwargs: Any) -> DataLoader:
    return DataLoader(Indexed(n), batch_size=batch, **kwargs)


def trainer(callbacks: list[pl.Callback], **kwargs: Any) -> pl.Trainer:
    kwargs.setdefault("max_epochs", 2)
    kwargs.setdefault("enable_checkpointing", False)
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        enable_progress_bar=False,
        logger=False,
        enable_model_summary=False,
        callbacks=callbacks,
        **kwargs,
    )


def weights(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


class Stop(Exception):
    """Ends a fit after :class:`SaveAndStop` saved its checkpoint (catch it with ``contextlib.suppress``)."""


class SaveAndStop(pl.Callback):
    """Saves a checkpoint to ``path`` after the batch that reaches ``global_step``, then raises :class:`Stop`."""

    def __init__(self, path: Any, global_step: int) -> None:
        self.path, self.global_step = path, global_step

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.global_step:
            trainer.save_checkpoint(self.path)
            raise Stop
