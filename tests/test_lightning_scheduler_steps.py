"""Lightning: every step of the LR schedulers Lightning configured is a scheduler step, through a checkpoint."""

from __future__ import annotations

import contextlib
import gc
import weakref
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")

import pytorch_lightning as pl
import torch

from tracker_core import get_progress
from tracker_core.checkpoints import read_checkpoint
from tracker_core.integrations.lightning import ProgressTracker

from helpers.lightning_program import Recording, loader, trainer

EPOCHS = 3  # of 4 batches (10 samples in batches of 3), accumulating 2: 2 optimizer steps an epoch
INTERVALS = {"step": ["step"], "epoch": ["epoch"], "step-and-epoch": ["step", "epoch"]}


class Killed(Exception):
    """Stands in for the process being killed right after a checkpoint."""


class SaveAndDie(pl.Callback):
    """Saves a checkpoint at the end of train batch number ``at`` (counted over the run), then dies."""

    def __init__(self, at: int, path: Path) -> None:
        self.at, self.path, self.count = at, path, 0

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self.count += 1
        if self.count == self.at:
            trainer.save_checkpoint(self.path)
            raise Killed


class Scheduled(Recording):
    """Recording's model with one StepLR per interval on its optimizer."""

    def __init__(self, intervals: list[str]) -> None:
        super().__init__()
        self.intervals = intervals

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        schedulers = [
            {"scheduler": torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5), "interval": interval}
            for interval in self.intervals
        ]
        return [optimizer], schedulers


def _fit(config: str, callbacks: list[pl.Callback], ckpt_path: Path | None = None) -> pl.Trainer:
    torch.manual_seed(0)
    fit = trainer([ProgressTracker(), *callbacks], max_epochs=EPOCHS, accumulate_grad_batches=2, limit_val_batches=0)
    with contextlib.suppress(Killed):
        fit.fit(Scheduled(INTERVALS[config]), loader(), ckpt_path=ckpt_path)
    return fit


def _last_epochs(fit: pl.Trainer) -> int:
    return sum(config.scheduler.last_epoch for config in fit.lr_scheduler_configs)


@pytest.mark.parametrize("config", list(INTERVALS))
def test_scheduler_steps_equal_the_last_epoch_of_the_schedulers_lightning_configured(config: str) -> None:
    fit = _fit(config, [])
    steps = {"step": 2 * EPOCHS, "epoch": EPOCHS, "step-and-epoch": 3 * EPOCHS}[config]
    assert _last_epochs(fit) == steps
    assert get_progress(fit).train.scheduler_steps.lifetime == steps


def test_scheduler_steps_survive_a_mid_epoch_checkpoint_round_trip(tmp_path: Path) -> None:
    config = "step-and-epoch"
    path = tmp_path / "killed.ckpt"
    _fit(config, [SaveAndDie(7, path)])  # epoch 2, batch 3: after 3 optimizer steps and 1 epoch end
    saved = torch.load(path, weights_only=True)
    saved_progress = read_checkpoint(path).entries[0]["progress"]
    saved_last_epochs = sum(state["last_epoch"] for state in saved["lr_schedulers"])
    assert saved_progress["stages"]["train"]["scheduler_steps"]["lifetime"] == saved_last_epochs > 0
    resumed = _fit(config, [], ckpt_path=path)
    assert get_progress(resumed).train.scheduler_steps.lifetime == _last_epochs(resumed)
    assert get_progress(resumed).train.scheduler_steps == get_progress(_fit(config, [])).train.scheduler_steps


def test_the_schedulers_the_user_drops_after_the_fit_are_freed_while_their_record_lives() -> None:
    fit = _fit("step-and-epoch", [])
    view = get_progress(fit)  # not the callback: Lightning gives each callback the module's log methods
    refs = [weakref.ref(config.scheduler) for config in fit.lr_scheduler_configs] + [weakref.ref(fit.lightning_module)]
    del fit
    gc.collect()
    assert [ref() for ref in refs] == [None] * 3
    assert view.train.scheduler_steps.lifetime == 3 * EPOCHS


@pytest.mark.parametrize("swa_first", [False, True], ids=["tracker-listed-first", "swa-listed-first"])
def test_the_scheduler_stochastic_weight_averaging_puts_in_is_counted_beside_the_one_it_replaced(
    swa_first: bool,
) -> None:
    torch.manual_seed(0)
    swa = pl.callbacks.StochasticWeightAveraging(swa_lrs=0.05, swa_epoch_start=2)
    tracker = ProgressTracker()
    fit = trainer([swa, tracker] if swa_first else [tracker, swa], max_epochs=4, limit_val_batches=0)
    fit.fit(Scheduled(["epoch"]), loader())
    assert [type(config.scheduler).__name__ for config in fit.lr_scheduler_configs] == ["SWALR"]
    # each epoch's end steps one scheduler: the StepLR before the swap, the SWALR after it
    assert get_progress(fit).train.scheduler_steps.lifetime == 4
