"""Lightning DDP checkpoints resumed at another world size, started by tests/test_lightning_elastic.py.

``python lightning_elastic_run.py two DIR``: ``strategy="ddp"`` on 2 CPU processes (the launcher
re-executes this script for rank 1), 24 samples, batches of 3 per rank (4 per rank and epoch),
2 epochs; checkpoints mid epoch 0 after 1 and 3 batches per rank (``trainer.save_checkpoint``:
``DIR/k1.ckpt``, ``DIR/k3.ckpt``) and every 2 steps (``ModelCheckpoint(every_n_train_steps=2)``:
``DIR/step=2.ckpt``, ``DIR/step=4.ckpt`` at the epoch's last batch, ...); the same accumulating 2
batches into ``DIR/accumulate``, and with a torchdata ``StatefulDataLoader`` into ``DIR/stateful``. ``one DIR``: one process resumes each case
of ``CASES`` with ``fit(ckpt_path=...)`` and validates ``step=2.ckpt`` with
``validate(ckpt_path=...)``, then saves like ``two`` on 1 process into ``DIR/one``.
``grow DIR``: 2 processes resume ``DIR/one/<GROW>``. Every process saves what it saw to
``DIR/<phase>-rank<r>.pt``: per train batch ``(epoch, sample ids)``, Lightning's and the
tracker's counters at the first resumed batch and at the end, the resume mapping,
``InexactResumeWarning`` messages and a ``ProgressStateError``.
"""

from __future__ import annotations

import os
import sys
import warnings
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, DistributedSampler
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import InexactResumeWarning, ProgressStateError, get_progress
from tracker_core.integrations.lightning import ProgressTracker

from helpers.lightning_program import Indexed, Recording
from helpers.rank_exit import exit_rank

SAMPLES = 24
BATCH = 3  # per rank when saving at world size 2
EPOCHS = 2
SEED = 0  # the DistributedSampler's (Lightning injects seed=PL_GLOBAL_SEED, unset: 0)
CASES: dict[str, tuple[str, int, str]] = {
    # name: (checkpoint, batch size at world size 1, how the loader is distributed)
    "own-sampler-x6": ("step=2.ckpt", 6, "own_sampler"),  # no DDP: the user's DistributedSampler(num_replicas=1)
    "plain-x6": ("step=2.ckpt", 6, "plain"),  # no DDP, no DistributedSampler: unsupported
    "two-loaders-x6": ("step=2.ckpt", 6, "two_loaders"),  # DDP, two train loaders: unsupported mid-epoch
    "k2-x6": ("step=2.ckpt", 6, "ddp"),
    "k2-x2": ("step=2.ckpt", 2, "ddp"),
    "k1-x2": ("k1.ckpt", 2, "ddp"),
    "k1-x4": ("k1.ckpt", 4, "ddp"),  # position 6 is not a multiple of 4: inexact
    "end-x2": ("step=4.ckpt", 2, "ddp"),  # saved at the epoch's last batch
}
ACCUMULATE = "k3.ckpt"  # of the run accumulating 2 batches: inside a window (1 of its 2 batches done)
GROW = "step=4.ckpt"  # of the world-size-1 run (8 batches of 3 per epoch): 12 samples in, 2 batches per rank at 2


def counters(trainer: pl.Trainer) -> dict[str, dict[str, int]]:
    """Lightning's loop counters next to the tracker's."""
    loop = trainer.fit_loop.epoch_loop
    view = get_progress(trainer)
    return {
        "lightning": {
            "epoch": trainer.current_epoch,
            "batch_idx": loop.batch_idx,
            "batches_total": loop.batch_progress.total.ready,
            "batches_epoch": loop.batch_progress.current.ready,
            "global_step": trainer.global_step,
            "batches_that_stepped": loop._batches_that_stepped,
        },
        "tracker": {
            "epoch": view.epoch_index,
            "batch_idx": view.batch_index,
            "batches_total": view.train.batches.run.ready,
            "batches_epoch": view.train.batches.epoch.ready,
            "global_step": view.global_step,
            "batches_that_stepped": view.global_step,  # one optimizer, no accumulation
        },
    }


class Record(pl.Callback):
    """Sample ids per train batch; both counters at the first batch and at the end; the resume mapping."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[int]]] = []
        self.first: dict[str, Any] | None = None
        self.end: dict[str, Any] | None = None
        self.mapping: dict[str, Any] | None = None

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, i: int) -> None:
        if self.first is None:
            self.first = counters(trainer)
            self.mapping = get_progress(trainer).resume_mapping
        self.batches.append((trainer.current_epoch, [int(j) for j in batch[2]]))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.end = counters(trainer)


class SaveAfter(pl.Callback):
    """Every rank calls ``trainer.save_checkpoint`` after its train batch number ``batches`` (rank 0 writes it)."""

    def __init__(self, path: Path, batches: int) -> None:
        self.path = path
        self.batches = batches
        self.count = 0

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self.count += 1
        if self.count == self.batches:
            trainer.save_checkpoint(self.path)


def _trainer(
    callbacks: list[pl.Callback], devices: int, ddp: bool, checkpoints: Path | None = None, accumulate: int = 1
) -> pl.Trainer:
    if checkpoints is not None:
        callbacks = [
            *callbacks,
            ModelCheckpoint(dirpath=checkpoints, filename="{step}", every_n_train_steps=2, save_top_k=-1),
        ]
    return pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if ddp else "auto",
        max_epochs=EPOCHS,
        accumulate_grad_batches=accumulate,
        limit_val_batches=0,
        enable_checkpointing=checkpoints is not None,
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        callbacks=callbacks,
    )


def save(folder: Path, devices: int, accumulate: int = 1, stateful: bool = False) -> dict[str, Any]:
    """An uninterrupted ``strategy="ddp"`` fit on ``devices`` processes, batches of 3, writing checkpoints to ``folder``.

    ``stateful``: the loader is a torchdata ``StatefulDataLoader`` (its position saved by Lightning's fit loop) with
    its own ``DistributedSampler`` (Lightning re-builds a StatefulDataLoader it shards with a batch sampler and no
    ``batch_size``, which the elastic mapping cannot read).
    """
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.manual_seed(rank)
    record = Record()
    callbacks = [ProgressTracker(), record, SaveAfter(folder / "k1.ckpt", 1), SaveAfter(folder / "k3.ckpt", 3)]
    trainer = _trainer(callbacks, devices, True, folder, accumulate)
    dataset = Indexed(SAMPLES)
    loader: DataLoader[Any] = DataLoader(dataset, batch_size=BATCH, shuffle=True)
    if stateful:
        sampler = DistributedSampler(dataset, num_replicas=devices, rank=rank, shuffle=True, seed=SEED)
        loader = StatefulDataLoader(dataset, batch_size=BATCH, sampler=sampler)
    trainer.fit(Recording(), loader)
    return {"rank": trainer.global_rank, "batches": record.batches, "end": record.end}


def resume(
    folder: Path, checkpoint: str, batch: int, loader_kind: str, devices: int = 1, accumulate: int = 1
) -> dict[str, Any]:
    """A fresh fit on ``devices`` processes resumed from ``folder/checkpoint`` with batches of ``batch``."""
    torch.manual_seed(1234)
    record = Record()
    tracker = ProgressTracker()
    dataset = Indexed(SAMPLES)
    if loader_kind == "own_sampler":
        sampler = DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=SEED)
        loader = DataLoader(dataset, batch_size=batch, sampler=sampler)
    elif loader_kind == "stateful":  # its own DistributedSampler, as when saved (see save)
        sampler = DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=SEED)
        loader = StatefulDataLoader(dataset, batch_size=batch, sampler=sampler)
    else:
        loader = DataLoader(dataset, batch_size=batch, shuffle=True)
    loaders: Any = [loader, loader] if loader_kind == "two_loaders" else loader
    ddp = loader_kind in ("ddp", "two_loaders", "stateful")
    trainer = _trainer([tracker, record], devices, ddp, accumulate=accumulate)
    found: dict[str, Any] = {"error": None}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            trainer.fit(Recording(), loaders, ckpt_path=folder / checkpoint)
        except ProgressStateError as error:
            found["error"] = {"key": error.key, "message": str(error)}
    found.update(
        rank=trainer.global_rank,
        batches=record.batches,
        first=record.first,
        end=record.end,
        mapping=record.mapping,
        inexact=[str(w.message) for w in caught if issubclass(w.category, InexactResumeWarning)],
    )
    return found


def validate(folder: Path, checkpoint: str) -> dict[str, Any]:
    """``trainer.validate(ckpt_path=folder/checkpoint)`` on 1 process (no DDP): the counts it leaves."""
    tracker = ProgressTracker()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[tracker],
    )
    found: dict[str, Any] = {"error": None}
    try:
        trainer.validate(Recording(), DataLoader(Indexed(SAMPLES), batch_size=BATCH), ckpt_path=folder / checkpoint)
    except ProgressStateError as error:
        found["error"] = {"key": error.key, "message": str(error)}
    view = get_progress(trainer)
    found.update(
        train_batches=view.train.batches.lifetime.completed, validate_batches=view.validate.batches.run.completed
    )
    return found


def main(phase: str, folder: Path) -> None:
    one = folder / "one"
    if phase == "two":  # save at world size 2, also accumulating 2 batches
        found = {"save": save(folder, 2)}
        (folder / "accumulate").mkdir(exist_ok=True)
        found["accumulate"] = save(folder / "accumulate", 2, accumulate=2)
        (folder / "stateful").mkdir(exist_ok=True)
        found["stateful"] = save(folder / "stateful", 2, stateful=True)
    elif phase == "one":  # resume each case at world size 1, then save at world size 1
        found = {name: resume(folder, *case) for name, case in CASES.items()}
        found["accumulate"] = resume(folder / "accumulate", ACCUMULATE, 6, "ddp", accumulate=2)
        found["stateful"] = resume(folder / "stateful", "k1.ckpt", 6, "stateful")  # refused: inside an epoch
        found["validate"] = validate(folder, "step=2.ckpt")
        one.mkdir(exist_ok=True)
        found["save"] = save(one, 1)
    else:  # "grow": resume the world-size-1 checkpoint at world size 2
        found = {"grow": resume(one, GROW, BATCH, "ddp", devices=2)}
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.save(found, folder / f"{phase}-rank{rank}.pt")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
    if torch.distributed.is_initialized():  # rank 0 leaves once rank 1 wrote its file too
        torch.distributed.barrier()
    exit_rank()
