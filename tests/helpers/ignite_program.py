"""Shared setup of the Ignite tests (no tests here): data that carry their sample ids, and a training program.

A :class:`Program` is one process's worth of objects: a model with dropout (so the
global RNG matters), SGD with momentum, a train DataLoader, a real Ignite trainer
from ``create_supervised_trainer``, an evaluator run on every EPOCH_COMPLETED, and a
``ProgressHandler`` attached to both. ``seen`` lists the sample ids of every train step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from ignite.engine import Engine, Events, create_supervised_evaluator, create_supervised_trainer
from ignite.handlers import Checkpoint, DiskSaver
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core.integrations.ignite import ProgressHandler

TRAIN_SIZE = 10  # batch 3: 4 batches per epoch, the last of 1 sample
VAL_SIZE = 5
BATCH = 3
EPOCHS = 3


def _features(size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(size, 4, generator=g), torch.randn(size, 1, generator=g)


class Indexed(Dataset[tuple[torch.Tensor, torch.Tensor, int]]):
    """Map-style: sample ``i`` is ``(x_i, y_i, i)``."""

    def __init__(self, size: int, seed: int = 0) -> None:
        self.x, self.y = _features(size, seed)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        return self.x[index], self.y[index], index


class Stream(IterableDataset[tuple[torch.Tensor, torch.Tensor, int]]):
    """Iterable: samples in a fixed order, split across workers; has a length for Ignite."""

    def __init__(self, size: int) -> None:
        self.x, self.y = _features(size, 0)

    def __len__(self) -> int:
        return len(self.x)

    def __iter__(self) -> Any:
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        for index in range(start, len(self.x), step):
            yield self.x[index], self.y[index], index


@dataclass(frozen=True)
class Config:
    shuffle: bool = True
    workers: int = 0
    stateful: bool = False
    iterable: bool = False
    accumulation: int = 1

    def loader(self) -> DataLoader[Any]:
        kind = StatefulDataLoader if self.stateful else DataLoader
        data: Any = Stream(TRAIN_SIZE) if self.iterable else Indexed(TRAIN_SIZE)
        shuffle = self.shuffle and not self.iterable
        return kind(data, batch_size=BATCH, shuffle=shuffle, num_workers=self.workers)


@dataclass
class Program:
    config: Config
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    loader: DataLoader[Any]
    trainer: Engine
    evaluator: Engine
    progress: ProgressHandler
    seen: list[list[int]] = field(default_factory=list)

    def to_save(self) -> dict[str, Any]:
        return {"trainer": self.trainer, "model": self.model, "optimizer": self.optimizer, "progress": self.progress}

    def run(self) -> None:
        self.trainer.run(self.loader, max_epochs=EPOCHS)

    def weights(self) -> dict[str, torch.Tensor]:
        return {k: v.clone() for k, v in self.model.state_dict().items()}


def build(config: Config, seed: int, heartbeat: str | Path | None = None) -> Program:
    """Fresh objects, as a new process would make them (``seed`` differs between processes); the handler
    keeps its heartbeat in ``heartbeat`` if given."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5), torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    seen: list[list[int]] = []

    def prepare(batch: Any, device: Any = None, non_blocking: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        seen.append(batch[2].tolist())
        return batch[0], batch[1]

    def prepare_eval(batch: Any, device: Any = None, non_blocking: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        return batch[0], batch[1]

    trainer = create_supervised_trainer(
        model,
        optimizer,
        torch.nn.MSELoss(),
        prepare_batch=prepare,
        gradient_accumulation_steps=config.accumulation,
    )
    evaluator = create_supervised_evaluator(model, prepare_batch=prepare_eval)
    progress = ProgressHandler(heartbeat=heartbeat)
    progress.attach(trainer, optimizers=[optimizer])
    progress.attach(evaluator, stage="validate")
    val_loader = DataLoader(Indexed(VAL_SIZE, seed=1), batch_size=2)
    trainer.add_event_handler(Events.EPOCH_COMPLETED, lambda: evaluator.run(val_loader))
    return Program(config, model, optimizer, config.loader(), trainer, evaluator, progress, seen)


class Saving(Protocol):
    """A program whose ``to_save()`` a Checkpoint on its ``trainer`` saves."""

    @property
    def trainer(self) -> Engine: ...

    def to_save(self) -> dict[str, Any]: ...


def save_every_iteration(program: Saving, folder: Path) -> None:
    """A Checkpoint after every train iteration, named by it: ``<folder>/<iteration>.pt``."""
    checkpoint = Checkpoint(
        program.to_save(),
        DiskSaver(str(folder), require_empty=False),
        n_saved=None,
        filename_pattern="{global_step}.pt",
        global_step_transform=lambda engine, _: engine.state.iteration,
    )
    program.trainer.add_event_handler(Events.ITERATION_COMPLETED, checkpoint)


def resume(config: Config, path: Path) -> Program:
    """Fresh objects, loaded from ``path`` with ``Checkpoint.load_objects`` (weights_only), then run."""
    program = build(config, seed=1234)
    Checkpoint.load_objects(program.to_save(), str(path))
    program.run()
    return program
