"""A training program on Ignite's ``DeterministicEngine`` (shared by the DeterministicEngine tests; no tests here).

As the plain program of ``ignite_program``: a model with dropout, SGD with momentum, a DataLoader over data
carrying their sample ids, and ``seen`` listing the ids of every train step; the trainer is a
``DeterministicEngine`` running Ignite's ``supervised_training_step``. A ``DeterministicEngine`` draws its
seed from the global RNG when its run starts, so a resumed process seeds as the first one did.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from ignite.engine import DeterministicEngine, supervised_training_step
from torch.utils.data import DataLoader

from tracker_core.integrations.ignite import ProgressHandler

from helpers.ignite_program import BATCH, TRAIN_SIZE, Indexed, Stream

EPOCHS = 2  # of 4 batches (10 samples, batch 3)


@dataclass
class Program:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    loader: Any
    trainer: DeterministicEngine
    progress: ProgressHandler | None
    seen: list[list[int]] = field(default_factory=list)

    def to_save(self) -> dict[str, Any]:
        saved = {"trainer": self.trainer, "model": self.model, "optimizer": self.optimizer}
        return saved if self.progress is None else {**saved, "progress": self.progress}

    def run(self) -> None:
        self.trainer.run(self.loader, max_epochs=EPOCHS)

    def weights(self) -> dict[str, torch.Tensor]:
        return {k: v.clone() for k, v in self.model.state_dict().items()}


def build(tracked: bool = True, shuffle: bool = False, iterable: bool = False) -> Program:
    """Fresh objects, seeded alike in every process; the ``ProgressHandler`` attached if ``tracked``."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5), torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    seen: list[list[int]] = []

    def prepare(batch: Any, device: Any = None, non_blocking: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        seen.append(batch[2].tolist())
        return batch[0], batch[1]

    step = supervised_training_step(model, optimizer, torch.nn.MSELoss(), prepare_batch=prepare)
    trainer = DeterministicEngine(step)
    data = Stream(TRAIN_SIZE) if iterable else Indexed(TRAIN_SIZE)
    loader = DataLoader(data, batch_size=BATCH, shuffle=shuffle)
    progress = None
    if tracked:
        progress = ProgressHandler()
        progress.attach(trainer, optimizers=[optimizer])
    return Program(model, optimizer, loader, trainer, progress, seen)
