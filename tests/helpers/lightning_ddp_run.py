"""A Lightning DDP program on 2 CPU processes (gloo), started by tests/test_lightning_ddp.py.

``python lightning_ddp_run.py straight DIR``: per configuration, 2 uninterrupted epochs; a
checkpoint after each train batch in ``AT[config]`` (counted over the run), written by rank 0
to ``DIR/<config>-<batch>.ckpt``; ``plain`` and ``accumulate`` with ``ProgressTracker(rank_files=True)``,
``gathered`` without (and a ``ModelCheckpoint`` every 2 steps into ``DIR/gathered-models``). ``python lightning_ddp_run.py resume DIR``: for each of those
checkpoints, a fresh Trainer, model and loader (a torchdata ``StatefulDataLoader``) resume it with ``fit(ckpt_path=...)``. ``... own DIR``:
rank ``r`` resumes ``DIR/only-rank<r>/plain-2.ckpt``, a copy beside which only its own rank file lies.
Lightning's launcher re-executes this script for rank 1. Each rank seeds its global RNG
differently (the loss draws noise from it), so a rank resumed with another rank's RNG
state would diverge. Each rank saves what it saw to ``DIR/<phase>-rank<r>.pt``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from torch.utils.data import DistributedSampler
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import check_divergence, get_progress, reduce_state
from tracker_core.integrations.lightning import ProgressTracker

from helpers.lightning_program import Indexed, Recording, weights
from helpers.rank_exit import exit_rank

SAMPLES = 24  # 12 per rank: 4 batches of 3 per rank and epoch
EPOCHS = 2
ACCUMULATE = {"plain": 1, "accumulate": 3, "gathered": 3}  # configurations: accumulate_grad_batches
AT = {
    "plain": (0, 2, 3, 5),  # first batch, mid epoch, last batch of epoch 1, mid epoch 2
    "accumulate": (1, 4),  # inside a window (Lightning's no_sync: each rank's partial gradients differ)
    "gathered": (1, 3),  # inside a window; the last batch of epoch 1
}
RANK_FILES = {"plain": True, "accumulate": True, "gathered": False}  # ProgressTracker(rank_files=...)
MODELS = "gathered-models"  # ModelCheckpoint's folder in the gathered configuration


class StatefulRecording(Recording):
    """:class:`Recording` whose ``train_dataloader`` is a torchdata ``StatefulDataLoader`` over a shuffling
    ``DistributedSampler`` of this rank: Lightning's fit loop saves and restores the loader's state, so a
    checkpoint after any batch resumes exactly (a plain DataLoader resumes only epoch ends exactly). The sampler is
    given here, with this rank, so the shard does not depend on Lightning re-creating the loader."""

    def train_dataloader(self) -> StatefulDataLoader[Any]:
        data = Indexed(SAMPLES)
        sampler = DistributedSampler(data, self.trainer.world_size, self.trainer.global_rank, shuffle=True)
        # A resumed StatefulDataLoader draws its sampler's order when Lightning restores it, before the fit loop's
        # set_epoch: give it the restored epoch's here.
        sampler.set_epoch(self.trainer.current_epoch)
        return StatefulDataLoader(data, batch_size=3, sampler=sampler)


class SaveAfter(pl.Callback):
    """Every rank calls ``save_checkpoint`` after the train batches ``at``; rank 0 writes ``<name>-<batch>.ckpt``."""

    def __init__(self, folder: Path, name: str, at: tuple[int, ...]) -> None:
        self.folder = folder
        self.name = name
        self.at = at
        self.count = 0

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if self.count in self.at:
            trainer.save_checkpoint(self.folder / f"{self.name}-{self.count}.ckpt")
        self.count += 1


class Findings(pl.Callback):
    """What Lightning and the tracker say on this rank at the end of training, plus the synced totals."""

    def __init__(self) -> None:
        self.found: dict[str, Any] = {}

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        view = get_progress(trainer)
        loop = trainer.fit_loop
        sampler = trainer.train_dataloader.sampler
        self.found = {
            "sampler": type(sampler).__name__,
            "shuffle": bool(getattr(sampler, "shuffle", False)),
            "lightning": {
                "global_step": trainer.global_step,
                "batches": loop.epoch_loop.batch_progress.total.completed,
                "epochs": loop.epoch_progress.total.processed,
            },
            "tracker": {
                "global_step": view.global_step,
                "batches": view.train.batches.run.completed,
                "epochs": view.train.epochs.run.processed,
                "samples": view.train.samples.run,
            },
            "sum": reduce_state(view, "sum"),
            "min": reduce_state(view, "min"),
            "max": reduce_state(view, "max"),
            "divergence": [str(d) for d in check_divergence(view)],
        }


def _fit(folder: Path, config: str, seed: int, ckpt_path: Path | None = None) -> dict[str, Any]:
    rank = int(os.environ.get("LOCAL_RANK", "0"))  # set for rank 1 by the launcher, for rank 0 after the 1st fit
    torch.manual_seed(seed + rank)
    model = StatefulRecording()
    tracker = ProgressTracker(rank_files=RANK_FILES[config])
    findings = Findings()
    callbacks: list[pl.Callback] = [tracker, findings]
    if ckpt_path is None:
        callbacks.append(SaveAfter(folder, config, AT[config]))
    if ckpt_path is None and config == "gathered":
        callbacks.append(ModelCheckpoint(folder / MODELS, every_n_train_steps=2, save_top_k=-1, save_last=True))
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=EPOCHS,
        accumulate_grad_batches=ACCUMULATE[config],
        limit_val_batches=0,
        enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks),
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        callbacks=callbacks,
    )
    trainer.fit(model, ckpt_path=ckpt_path)
    return {
        "rank": trainer.global_rank,
        "seen": model.seen,
        "weights": weights(model),
        "progress": get_progress(trainer).state_dict(),  # this rank's
        **findings.found,
    }


def main(phase: str, folder: Path) -> None:
    if phase == "own":  # each rank resumes plain-2 from a copy beside which only its own rank file lies
        rank = int(os.environ.get("LOCAL_RANK", "0"))
        own = _fit(folder, "plain", seed=1234, ckpt_path=folder / f"only-rank{rank}" / "plain-2.ckpt")
        torch.save({"plain-2": own}, folder / f"own-rank{own['rank']}.pt")
        return
    runs = {}
    for config, at in AT.items():
        if phase == "straight":
            runs[config] = _fit(folder, config, seed=0)
        else:
            for batch in at:
                runs[f"{config}-{batch}"] = _fit(folder, config, seed=1234, ckpt_path=folder / f"{config}-{batch}.ckpt")
    rank = next(iter(runs.values()))["rank"]
    torch.save(runs, folder / f"{phase}-rank{rank}.pt")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
    if torch.distributed.is_initialized():  # rank 0 leaves once rank 1 wrote its file too
        torch.distributed.barrier()
    exit_rank()
