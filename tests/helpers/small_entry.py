"""One rank's tracker entry mid-epoch, with one shuffled train loader: what the size tests and
``benchmarks/checkpoint_scale.py`` measure. A plain loader's mid-epoch entry holds no position (its resume reads the
epoch from its start); :func:`stateful_loader`'s (torchdata's StatefulDataLoader) resumes at its batch."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import Tracker

BATCH_SIZE = 4
DATASET_SIZE = 64


def shuffled_loader(sampler: Any = None) -> DataLoader[Any]:
    """A map-style loader of ``DATASET_SIZE`` numbers (shuffled unless a ``sampler`` is given)."""
    data = TensorDataset(torch.arange(float(DATASET_SIZE)))
    return DataLoader(data, batch_size=BATCH_SIZE, shuffle=sampler is None, sampler=sampler)


def stateful_loader() -> StatefulDataLoader[Any]:
    """:func:`shuffled_loader` as torchdata's StatefulDataLoader: its position is its own state, saved in the entry."""
    data = TensorDataset(torch.arange(float(DATASET_SIZE)))
    return StatefulDataLoader(data, batch_size=BATCH_SIZE, shuffle=True)


def trained(
    batches: int, loader: DataLoader[Any] | None = None, draws_per_batch: int = 0, whole_epochs: int = 0
) -> tuple[Tracker, DataLoader[Any], Any]:
    """A tracker after ``whole_epochs`` epochs of its loader and ``batches`` train batches of the next, the loader
    (keep it: the tracker holds it weakly) and that epoch's iterator.

    A tiny model is initialised first (global torch draws, as any training does); each batch then
    draws ``draws_per_batch`` numbers from the global torch generator (dropout on the CPU).
    """
    torch.nn.Linear(4, 1)
    loader = shuffled_loader() if loader is None else loader
    tracker = Tracker()
    tracker.track_train_loader(loader)
    progress = tracker.progress
    progress.run_ready("fit")
    progress.run_started()
    train = progress.train
    for epoch in range(whole_epochs + 1):
        train.epoch_ready()
        train.epoch_started()
        iterator = iter(loader)
        for _ in range(batches if epoch == whole_epochs else len(loader)):
            next(iterator)
            train.batch_ready()
            train.batch_started()
            if draws_per_batch:
                torch.rand(draws_per_batch)
            train.optimizer_step()
            train.batch_processed(BATCH_SIZE)
            train.batch_completed()
        if epoch < whole_epochs:
            train.epoch_processed()
            train.epoch_completed()
    return tracker, loader, iterator
