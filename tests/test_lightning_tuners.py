"""Lightning's tuners (``BatchSizeFinder``, ``LearningRateFinder``, as callbacks or through ``Tuner``) save a
checkpoint, run their trials and restore it before the fit trains: with the tracker the fit trains exactly as
without it (the restore is no resume), and nothing is noted or warned."""

from __future__ import annotations

import importlib
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")

import torch
from torch.utils.data import DataLoader, Dataset

from tracker_core import get_progress
from tracker_core.integrations.lightning import ProgressTracker

from helpers.lightning_matrix import PACKAGES

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class _Indexed(Dataset[tuple[torch.Tensor, torch.Tensor, int]]):
    def __len__(self) -> int:
        return 30

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        return torch.full((4,), index / 10), torch.tensor([float(index % 3)]), index


def _fit(package: str, tuner: str, tracked: bool, root: Path) -> tuple[Any, list[list[int]], list[str]]:
    """A fit after ``tuner`` (``<batch_size|lr>_<callback|tuner>``): its module, the sample ids it trained, and the
    warnings of tracker-core."""
    pl = importlib.import_module(package)

    class Module(pl.LightningModule):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            self.batch_size, self.lr = 3, 0.1
            self.seen: list[list[int]] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y, ids = batch
            self.seen.append(ids.tolist())
            return torch.nn.functional.mse_loss(self.layer(x + 0.01 * torch.randn_like(x)), y)  # draws the RNG

        def train_dataloader(self) -> DataLoader[Any]:
            return DataLoader(_Indexed(), batch_size=self.batch_size, shuffle=True)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    torch.manual_seed(0)
    callbacks: list[Any] = [ProgressTracker()] if tracked else []
    if tuner == "batch_size_callback":
        callbacks.append(pl.callbacks.BatchSizeFinder(steps_per_trial=2, max_trials=2))
    if tuner == "lr_callback":
        callbacks.append(pl.callbacks.LearningRateFinder(num_training_steps=5))
    trainer = pl.Trainer(
        max_epochs=2,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        default_root_dir=root,
    )
    module = Module()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if tuner == "batch_size_tuner":
            pl.tuner.Tuner(trainer).scale_batch_size(module, mode="power", steps_per_trial=2, max_trials=2)
        if tuner == "lr_tuner":
            pl.tuner.Tuner(trainer).lr_find(module, num_training=5)
        module.seen.clear()  # the fit's batches only
        trainer.fit(module)
    if tracked:
        assert get_progress(trainer).anomalies == ()
    return module, module.seen, [str(w.message) for w in caught if "tracker_core" in w.filename]


@pytest.mark.parametrize("package", PACKAGES)
@pytest.mark.parametrize("tuner", ["batch_size_callback", "batch_size_tuner", "lr_callback", "lr_tuner"])
def test_a_fit_after_a_tuner_trains_as_without_the_tracker_and_notes_nothing(
    package: str, tuner: str, tmp_path: Path
) -> None:
    tracked, tracked_ids, tracked_warnings = _fit(package, tuner, True, tmp_path)
    alone, alone_ids, _ = _fit(package, tuner, False, tmp_path)
    assert tracked_ids == alone_ids
    for mine, its in zip(tracked.parameters(), alone.parameters(), strict=True):
        assert torch.equal(mine, its)
    assert tracked_warnings == []
