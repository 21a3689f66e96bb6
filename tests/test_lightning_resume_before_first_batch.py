"""A checkpoint of a new fit saved after Lightning built its first train iterator and before its first batch
(``on_train_start``, ``on_train_epoch_start`` of epoch 0; ``OnExceptionCheckpoint`` after an exception there).

The resumed fit builds that iterator again: the entry holds the RNGs (global, the loaders' generators) as they were
before the build, so the resume equals the uninterrupted run (weights, sample ids, progress), as Lightning alone
resumes it, without a warning."""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("torchdata")

import pytorch_lightning as pl
import torch
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import InexactResumeWarning, get_progress
from tracker_core.integrations.lightning import ProgressTracker

from helpers.ledger import without_ledger
from helpers.lightning_program import Indexed, Recording, Stop, trainer, weights

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class _SaveInHookAndStop(pl.Callback):
    """Saves ``path`` in ``hook`` of train epoch ``epoch``, then stops the fit at its next train batch."""

    def __init__(self, hook: str, path: Path, epoch: int = 0) -> None:
        self.hook, self.path, self.epoch, self.saved = hook, path, epoch, False

    def on_train_start(self, trainer: pl.Trainer, *args: Any) -> None:
        self._save(trainer, "on_train_start")

    def on_train_epoch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        self._save(trainer, "on_train_epoch_start")

    def _save(self, trainer: pl.Trainer, hook: str) -> None:
        if hook == self.hook and trainer.current_epoch == self.epoch and not self.saved:
            trainer.save_checkpoint(self.path)
            self.saved = True

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        if self.saved:
            raise Stop


def _fit(stateful: bool, seed: int, *callbacks: pl.Callback, ckpt_path: Path | None = None) -> tuple[Any, Any]:
    torch.manual_seed(seed)
    kind = StatefulDataLoader if stateful else DataLoader
    module = Recording()
    fit = trainer([ProgressTracker(), *callbacks], max_epochs=2, limit_val_batches=0)
    with contextlib.suppress(Stop):
        fit.fit(module, kind(Indexed(10), batch_size=3, shuffle=True), ckpt_path=ckpt_path)
    return fit, module


@pytest.mark.parametrize("stateful", [False, True], ids=["plain", "stateful"])
@pytest.mark.parametrize("hook", ["on_train_start", "on_train_epoch_start"])
def test_a_checkpoint_before_a_new_fits_first_batch_resumes_exactly_without_warning(
    hook: str, stateful: bool, tmp_path: Path
) -> None:
    straight, straight_module = _fit(stateful, 0)
    path = tmp_path / "start.ckpt"
    with warnings.catch_warnings():
        warnings.simplefilter("error", InexactResumeWarning)
        _, first = _fit(stateful, 0, _SaveInHookAndStop(hook, path))
        resumed, resumed_module = _fit(stateful, 1234, ckpt_path=path)
    assert first.seen == []
    assert resumed_module.seen == straight_module.seen
    assert all(torch.equal(a, b) for a, b in zip(weights(resumed_module), weights(straight_module), strict=True))
    resumed_view, straight_view = get_progress(resumed).state_dict(), get_progress(straight).state_dict()
    assert without_ledger(resumed_view) == without_ledger(straight_view)


def test_a_checkpoint_in_the_epoch_start_of_a_later_epoch_warns_that_lightning_trains_one_epoch_fewer(
    tmp_path: Path,
) -> None:
    path = tmp_path / "epoch_1_start.ckpt"
    with pytest.warns(InexactResumeWarning, match="on_train_epoch_start of epoch 1 .* one epoch fewer"):
        _fit(True, 0, _SaveInHookAndStop("on_train_epoch_start", path, epoch=1))
    resumed, module = _fit(True, 1234, ckpt_path=path)
    assert (resumed.current_epoch, module.seen) == (2, [])  # of max_epochs=2: epoch 1 counted as trained, untrained
