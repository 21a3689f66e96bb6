"""A small Lightning fit (either package) that saves and stops at a train batch, and resumes with an optional reseed.

10 shuffled samples in batches of 3 (4 batches an epoch), 2 epochs; the loss draws noise from
the global RNG, so any change of the RNGs changes the weights. Options add draws that the
uninterrupted run makes too: in the dataset (``Noisy``), in ``on_after_batch_transfer``, and a
per-epoch value drawn in the module's ``on_train_epoch_start``.
"""

from __future__ import annotations

import contextlib
import importlib
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

from tracker_core.integrations.lightning import ProgressTracker

from helpers.lightning_program import Indexed, IndexedStream
from helpers.loader_workers import end_stopped_fit

BATCHES = 4  # an epoch: 3, 3, 3, 1 samples


class Noisy(Indexed):
    """:class:`Indexed` whose features get noise from the global RNG (an augmentation), in the main process
    without workers."""

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        x, y, index = super().__getitem__(i)
        return x + 0.01 * torch.rand(4), y, index


class NoisyStream(IndexedStream):
    """:class:`IndexedStream` whose features get noise from the global RNG, in the main process without workers."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        for x, y, index in super().__iter__():
            yield x + 0.01 * torch.rand(4), y, index


def _loader(kind: str, noisy: bool, workers: int, generator: torch.Generator | None) -> DataLoader[Any]:
    if kind == "iterable":
        return DataLoader((NoisyStream if noisy else IndexedStream)(), batch_size=3, num_workers=workers)
    if kind == "stateful-iterable":
        from torchdata.stateful_dataloader import StatefulDataLoader

        return StatefulDataLoader((NoisyStream if noisy else IndexedStream)(), batch_size=3, num_workers=workers)
    data = (Noisy if noisy else Indexed)()
    if kind == "stateful":
        from torchdata.stateful_dataloader import StatefulDataLoader

        return StatefulDataLoader(data, batch_size=3, shuffle=True, num_workers=workers, generator=generator)
    return DataLoader(data, batch_size=3, shuffle=True, num_workers=workers, generator=generator)


class Stop(Exception):
    """Ends the first fit right after its checkpoint (stands in for the process dying)."""


_DRAWS = {
    "torch": lambda: torch.rand(1),
    "random": lambda: torch.tensor([random.random()]),
    "numpy": lambda: torch.tensor([np.random.rand()]),
}

_RESEEDS = {
    "torch": lambda: torch.manual_seed(0),  # what seed_everything(0) does to torch's generator
    "random": lambda: random.seed(42),  # a seed neither run starts with: the state changes
    "numpy": lambda: np.random.seed(42),
    "draw-random": lambda: random.random(),  # no seed: a draw, as a per-epoch augmentation parameter would
}


def fit(
    package: str,
    path: Path,
    save_at: int | None = None,
    reseed: str = "",
    draw_before: bool = False,
    *,
    in_epoch_end: bool = False,
    workers: int = 0,
    own_generator: bool = False,
    noisy_data: bool = False,
    draw_at_transfer: bool = False,
    draw_each_epoch: bool | str = False,
    reseeded: str = "torch",
    loaders: int = 1,
    kind: str = "map",
    fetch_in_step: bool = False,
    in_validation: bool = False,
    draw_before_each_epoch: bool = False,
) -> list[torch.Tensor]:
    """Fit, saving to ``path`` at the end of train batch ``save_at`` (0-based over the run) and stopping
    there (``in_epoch_end``: in that epoch's ``on_train_epoch_end``, as ``ModelCheckpoint`` does without
    validation; Lightning then runs the next epoch's start hooks on resume, not after a save in the last
    ``on_train_batch_end``); without ``save_at``, resume from ``path`` if it exists. ``reseed``: ``"module.<hook>"`` or
    ``"callback.<hook>"`` (a callback after the tracker; ``"early_callback.<hook>"``: before it) reseeds the
    global RNG in that hook. ``draw_before``: a callback listed before
    the tracker draws from the global RNG at every ``on_train_batch_start`` (in every run). In every run
    too: ``workers`` loader workers, ``own_generator`` (the loader's, not the global RNG), ``noisy_data`` (:class:`Noisy`), ``draw_at_transfer`` (the module's
    ``on_after_batch_transfer`` draws), ``draw_each_epoch`` (its ``on_train_epoch_start`` draws a shift
    the loss uses; ``"random"`` or ``"numpy"``: from that generator, not torch's). ``reseeded``: the generator ``reseed`` seeds (``"torch"``, ``"random"``, ``"numpy"``;
    ``"draw-random"``: draws from Python's instead).
    ``loaders``: that many train loaders of the same data (Lightning combines them, ``max_size_cycle``).
    ``kind``: ``"map"`` (a shuffled map-style ``DataLoader``), ``"iterable"`` (an ``IterableDataset`` without a
    length, in a fixed order: Lightning prefetches its first batch when it builds the iterator) or
    ``"stateful"`` (a shuffled torchdata ``StatefulDataLoader``; ``"stateful-iterable"``: one over that iterable). ``fetch_in_step``: ``training_step(dataloader_iter)``
    fetches its own batch (after the ``on_train_batch_start`` hooks). ``in_validation``: a validation after every
    2 train batches; the checkpoint is saved inside the first validation batch after train batch ``save_at``
    (Lightning finishes that validation on resume). ``draw_before_each_epoch``: a callback listed before the
    tracker draws from Python's RNG in every ``on_train_epoch_start`` (in every run).
    Returns the final weights."""
    pl = importlib.import_module(package)
    reseed_owner, _, reseed_hook = reseed.partition(".")

    class Model(pl.LightningModule):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

            self.shift = torch.zeros(1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y, _ = batch if loaders == 1 else [torch.cat(parts) for parts in zip(*batch, strict=True)]
            return torch.nn.functional.mse_loss(self.layer(x + 0.01 * torch.randn_like(x) + self.shift), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            if save_at is not None and saver.batches > save_at:
                self.trainer.save_checkpoint(path)
                raise Stop

    class FetchingModel(Model):
        def training_step(self, dataloader_iter: Any) -> torch.Tensor:  # type: ignore[override]
            batch, batch_idx, _ = next(dataloader_iter)
            return super().training_step(batch, batch_idx)

    class Saver(pl.Callback):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            self.batches = 0

        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            if self.batches == save_at and not (in_epoch_end or in_validation):
                trainer.save_checkpoint(path)
                raise Stop
            self.batches += 1

        def on_train_epoch_end(self, trainer: Any, *args: Any) -> None:
            if in_epoch_end and save_at is not None and self.batches == save_at + 1:
                trainer.save_checkpoint(path)
                raise Stop

    class Reseeder(pl.Callback):  # type: ignore[misc,name-defined]
        pass

    class EarlyReseeder(pl.Callback):  # type: ignore[misc,name-defined]
        pass

    class Drawer(pl.Callback):  # type: ignore[misc,name-defined]
        def on_train_batch_start(self, *args: Any) -> None:
            torch.rand(1)

    class EpochDrawer(pl.Callback):  # type: ignore[misc,name-defined]
        def on_train_epoch_start(self, *args: Any) -> None:
            random.random()

    def draw_shift(self: Any) -> None:
        self.shift = 0.01 * _DRAWS[draw_each_epoch if isinstance(draw_each_epoch, str) else "torch"]()

    def draw_at(self: Any, batch: Any, dataloader_idx: int) -> Any:
        torch.rand(1)
        return batch

    if draw_each_epoch:
        Model.on_train_epoch_start = draw_shift
    if draw_at_transfer:
        Model.on_after_batch_transfer = draw_at
    if reseed_owner:
        owner = {"module": Model, "callback": Reseeder, "early_callback": EarlyReseeder}[reseed_owner]
        setattr(owner, reseed_hook, lambda *args: _RESEEDS[reseeded]())
    seed = 0 if save_at is not None or not path.exists() else 1234
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    model = (FetchingModel if fetch_in_step else Model)()
    saver = Saver()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=2,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        callbacks=[
            *([Drawer()] if draw_before else []),
            *([EpochDrawer()] if draw_before_each_epoch else []),
            EarlyReseeder(),
            ProgressTracker(),
            saver,
            Reseeder(),
        ],
        **({"val_check_interval": 2, "num_sanity_val_steps": 0} if in_validation else {}),
    )
    resume = save_at is None and path.exists()
    with contextlib.suppress(Stop):
        generator = torch.Generator().manual_seed(7) if own_generator else None
        train = [_loader(kind, noisy_data, workers, generator) for _ in range(loaders)]
        validation = DataLoader(Indexed(), batch_size=3) if in_validation else None
        trainer.fit(model, train[0] if loaders == 1 else train, validation, ckpt_path=path if resume else None)
    end_stopped_fit(trainer)
    return [p.detach().clone() for p in model.parameters()]
