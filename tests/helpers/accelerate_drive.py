"""A small Accelerate training program driven through AcceleratorProgress, for the accelerate tests.

``run(setup, ...)`` trains Linear(4, 1) with input dropout (so the global RNG matters) on a
dataset whose samples carry their index, validating after every epoch. It can stop right
after a ``save_state`` at a given point, or start by loading a checkpoint; the result holds
the final weights, the sample ids the steps saw, and the tracker's full state.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import DataLoaderConfiguration, ProjectConfiguration
from torch.utils.data import DataLoader, Dataset, IterableDataset
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core.integrations.accelerate import AcceleratorProgress

from helpers.ledger import without_ledger


class Indexed(Dataset[tuple[int, torch.Tensor, torch.Tensor]]):
    """Sample ``i`` is ``(i, x_i, y_i)`` with fixed, index-derived values."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.x = torch.linspace(-1, 1, size * 4).reshape(size, 4)
        self.y = self.x.sum(dim=1, keepdim=True).sin()

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[int, torch.Tensor, torch.Tensor]:
        return index, self.x[index], self.y[index]


class Streamed(IterableDataset[tuple[int, torch.Tensor, torch.Tensor]]):
    """The samples of ``Indexed(size)`` in an order drawn from the global torch RNG at each ``iter``."""

    def __init__(self, size: int) -> None:
        self.indexed = Indexed(size)

    def __iter__(self) -> Iterator[tuple[int, torch.Tensor, torch.Tensor]]:
        return (self.indexed[i] for i in torch.randperm(self.indexed.size).tolist())


@dataclass(frozen=True)
class Setup:
    """One configuration of the program."""

    samples: int = 10
    batch_size: int = 3
    accumulation: int = 2
    epochs: int = 3
    shuffle: bool = True
    num_workers: int = 0
    seedable: bool = False
    stateful: bool = False
    optimizers: int = 1
    iterable: bool = False
    torchdata: bool = False  # the train loader is torchdata's StatefulDataLoader (with ``stateful``: exact mid-epoch)
    prepared: bool = True  # the train loader goes through accelerator.prepare (else iterated as built: one process)
    val_generator: bool = False  # the validation loader shuffles by a generator of its own


@dataclass
class Result:
    weights: list[torch.Tensor]
    train_ids: list[list[int]] = field(default_factory=list)
    val_ids: list[list[int]] = field(default_factory=list)
    state: dict[str, Any] = field(default_factory=dict)
    accelerator: Any = None
    progress: Any = None


@dataclass(frozen=True)
class StopAt:
    """Save and stop after train batch ``batch`` (global, 0-based) or, with ``validating``, after the second val batch
    of the validation that follows it (``batch`` the last of an epoch)."""

    batch: int
    validating: bool = False


def fresh_accelerator(setup: Setup, project_dir: str | None = None) -> Accelerator:
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    config = DataLoaderConfiguration(use_seedable_sampler=setup.seedable, use_stateful_dataloader=setup.stateful)
    project = None
    if project_dir is not None:
        project = ProjectConfiguration(project_dir=project_dir, automatic_checkpoint_naming=True)
    return Accelerator(
        cpu=True,
        gradient_accumulation_steps=setup.accumulation,
        dataloader_config=config,
        project_config=project,
    )


def seed(value: int) -> None:
    torch.manual_seed(value)
    random.seed(value)
    np.random.seed(value)


def run(
    setup: Setup,
    *,
    stop: StopAt | None = None,
    save_dir: str | None = None,
    load_dir: str | None = None,
    seed_value: int = 0,
    registered: bool = True,
) -> Result:
    seed(seed_value)
    accelerator = fresh_accelerator(setup)
    torch.manual_seed(0)  # the same initial weights whatever the seed
    models = [torch.nn.Linear(4, 1) for _ in range(setup.optimizers)]
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in models]
    seed(seed_value)
    if setup.iterable:
        train_loader = DataLoader(Streamed(setup.samples), batch_size=setup.batch_size, num_workers=setup.num_workers)
    else:
        kind = StatefulDataLoader if setup.torchdata else DataLoader
        train_loader = kind(
            Indexed(setup.samples), batch_size=setup.batch_size, shuffle=setup.shuffle, num_workers=setup.num_workers
        )
    generator = torch.Generator().manual_seed(3) if setup.val_generator else None
    val_loader = DataLoader(Indexed(7), batch_size=3, shuffle=setup.val_generator, generator=generator)
    loaders = [train_loader, val_loader] if setup.prepared else [val_loader]
    prepared = accelerator.prepare(*models, *optimizers, *loaders)
    models = list(prepared[: setup.optimizers])
    optimizers = list(prepared[setup.optimizers : 2 * setup.optimizers])
    val_loader = prepared[-1]
    progress = AcceleratorProgress(accelerator)
    if registered:  # its saves are committed
        accelerator.register_for_checkpointing(progress)
    if setup.prepared:  # one never prepared is tracked by progress.train() (track_train_loader refuses it)
        train_loader = prepared[-2]
        progress.track_train_loader(train_loader)
    if load_dir is not None:
        accelerator.load_state(load_dir)
        accelerator.project_configuration.iteration = progress.next_save_iteration  # automatic naming continues
    result = Result(weights=[])
    position = progress.view.train.batches.lifetime.completed
    with progress.fit(setup.epochs) as fit:
        for _epoch in fit.epochs():
            for ids, x, y in progress.train(train_loader):
                result.train_ids.append(ids.tolist())
                with accelerator.accumulate(*models):
                    for model in models:
                        out = model(torch.nn.functional.dropout(x, 0.3))
                        accelerator.backward(torch.nn.functional.mse_loss(out, y))
                    for optimizer in optimizers:
                        optimizer.step()
                        optimizer.zero_grad()
                if stop is not None and not stop.validating and position == stop.batch:
                    accelerator.save_state(save_dir)
                    return _finish(result, models, accelerator, progress)
                position += 1
            for val_index, (ids, x, _y) in enumerate(progress.evaluate(val_loader)):
                result.val_ids.append(ids.tolist())
                with torch.no_grad():
                    models[0](x)
                if stop is not None and stop.validating and position - 1 == stop.batch and val_index == 1:
                    accelerator.save_state(save_dir)
                    return _finish(result, models, accelerator, progress)
    return _finish(result, models, accelerator, progress)


def _finish(
    result: Result, models: list[torch.nn.Module], accelerator: Accelerator, progress: AcceleratorProgress
) -> Result:
    result.weights = [p.detach().clone() for m in models for p in m.parameters()]
    result.state = without_ledger(progress._tracker.state_dict()["progress"])  # compared with uninterrupted runs
    result.accelerator = accelerator
    result.progress = progress
    return result
