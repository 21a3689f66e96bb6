"""The per-batch train hooks of the Lightning callback (``ProgressTracker`` derives from this class): they mark
the train driver's batch phases, inline (every batch)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from tracker_core import EventOrderError, Tracker
from tracker_core.integrations.lightning._bases import CallbackBase
from tracker_core.integrations.lightning._combined_batches import CombinedBatches
from tracker_core.integrations.lightning._resume_rng import ResumeRngChecks
from tracker_core.integrations.lightning._stage_driver import StageDriver

if TYPE_CHECKING:
    import weakref

    import pytorch_lightning as pl


class TrainBatchHooks(CallbackBase):
    """Lightning's ``on_train_batch_*`` and ``on_before_*`` hooks, for the callback's train driver."""

    tracker: Tracker
    _train: StageDriver
    _combined: CombinedBatches | None  # several train loaders
    _rng: ResumeRngChecks
    _trainer: weakref.ref[pl.Trainer] | None
    _anomaly: Callable[[str], None]

    # The per-batch hooks guard inline (a try costs nothing in Python 3.11; a wrapper costs a call)
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        try:
            self._train.batch_begin(batch)
        except EventOrderError as error:
            self._anomaly(f"on_train_batch_start: {error}")
        if self._combined is not None:
            self._combined.batch = batch
        self._rng.at_setup = None  # Lightning iterates the setup_data iterator: its draws stand

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        train = self._train  # the batch's step began: Lightning marked it started (every batch: inline)
        if train.batch_to_start:
            train.batch_to_start = False
            try:
                train.stage.batch_started()
            except EventOrderError as error:
                self._anomaly(f"on_before_backward: {error}")

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        train = self._train  # the batch's step began: Lightning marked it started (every batch: inline)
        if train.batch_to_start:  # also in manual optimization after a plain loss.backward()
            train.batch_to_start = False
            try:
                train.stage.batch_started()
            except EventOrderError as error:
                self._anomaly(f"on_before_optimizer_step: {error}")

    def on_before_zero_grad(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        train = self._train  # the batch's step began: Lightning marked it started (every batch: inline)
        if train.batch_to_start:
            train.batch_to_start = False
            try:
                train.stage.batch_started()
            except EventOrderError as error:
                self._anomaly(f"on_before_zero_grad: {error}")

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        try:
            if self._combined is not None:
                self._combined.batch_end(self._train, batch, self._trainer() if self._trainer is not None else None)
                return
            if batch is None and self._no_batch_begun():
                self._train.batch_of_none()  # the loader yielded None: Lightning ran no start hook and no step
                return
            # training_step(dataloader_iter) fetches its own batch: Lightning passes that one here
            self._train.batch_end(0, batch)
        except EventOrderError as error:
            self._anomaly(f"on_train_batch_end: {error}")

    def _no_batch_begun(self) -> bool:
        """No train batch was begun since the last one processed (Lightning ran no ``on_train_batch_start``)."""
        batches = self.tracker.progress.train.view.batches.lifetime
        return batches.ready == batches.processed
