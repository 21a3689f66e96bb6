"""The validate, test and predict hooks of the Lightning callback (``ProgressTracker`` derives from this class):
each marks its stage's driver; outside a fit each call is a run of its own."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tracker_core import Tracker
from tracker_core.adapter import bind_lifetime
from tracker_core.integrations.lightning._bases import CallbackBase
from tracker_core.integrations.lightning._passenger import passenger
from tracker_core.integrations.lightning._resume_rng import ResumeRngChecks
from tracker_core.integrations.lightning._stage_driver import StageDriver

if TYPE_CHECKING:
    import pytorch_lightning as pl

_FIT = "fit"  # trainer.state.fn while fitting (Lightning's TrainerFn is a str enum in both packages)


class EvaluationHooks(CallbackBase):
    """Lightning's ``on_{validation,test,predict}_*`` hooks, for the callback's drivers of those stages."""

    tracker: Tracker
    _train: StageDriver
    _validate: StageDriver
    _test: StageDriver
    _predict: StageDriver
    _rng: ResumeRngChecks
    _run_begun: bool  # this call's run is counted
    _anomaly: Callable[[str], None]

    def _evaluation_start(self, trainer: pl.Trainer, kind: str) -> None:
        if trainer.state.fn == _FIT:
            self._train.settle()  # a train batch ended before this validation
        else:
            bind_lifetime(trainer.lightning_module, self.tracker.progress)
            self.tracker.progress.run_ready(kind)
            self.tracker.progress.run_started()
            self._run_begun = True

    def _evaluation_end(self, trainer: pl.Trainer, driver: StageDriver) -> None:
        driver.settle()
        if trainer.state.fn != _FIT:
            self.tracker.progress.run_processed()
            self.tracker.progress.run_completed()

    @passenger
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._evaluation_start(trainer, "validate")

    @passenger
    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._validate.epoch_begin()

    @passenger
    def on_validation_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if not trainer.sanity_checking:
            self._validate.batch_begin(batch)

    @passenger
    def on_validation_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if not trainer.sanity_checking:
            self._validate.batch_end(dataloader_idx)

    @passenger
    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._validate.epoch_end()

    @passenger
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._evaluation_end(trainer, self._validate)
            self._rng.validation_ended()

    @passenger
    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._evaluation_start(trainer, "test")

    @passenger
    def on_test_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._test.epoch_begin()

    @passenger
    def on_test_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._test.batch_begin(batch)

    @passenger
    def on_test_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._test.batch_end(dataloader_idx)

    @passenger
    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._test.epoch_end()

    @passenger
    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._evaluation_end(trainer, self._test)

    @passenger
    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._evaluation_start(trainer, "predict")

    @passenger
    def on_predict_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._predict.epoch_begin()

    @passenger
    def on_predict_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._predict.batch_begin(batch)

    @passenger
    def on_predict_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self._predict.batch_end(dataloader_idx)

    @passenger
    def on_predict_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._predict.epoch_end()

    @passenger
    def on_predict_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._evaluation_end(trainer, self._predict)
