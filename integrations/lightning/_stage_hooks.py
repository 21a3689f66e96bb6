"""The stage hooks of the Lightning callback (``ProgressTracker`` derives from this class): the per-batch train
hooks, guarded inline, and the validate, test and predict hooks, guarded by ``passenger``."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import torch

from tracker_core import EventOrderError, Tracker
from tracker_core.adapter import bind_lifetime, count_scheduler_steps
from tracker_core.integrations.lightning._bases import CallbackBase
from tracker_core.integrations.lightning._combined_batches import CombinedBatches
from tracker_core.integrations.lightning._resume_rng import ResumeRngChecks
from tracker_core.integrations.lightning._stage_driver import StageDriver

if TYPE_CHECKING:
    import pytorch_lightning as pl

_FIT = "fit"  # trainer.state.fn while fitting (Lightning's TrainerFn is a str enum in both packages)

_Hook = TypeVar("_Hook", bound=Callable[..., None])


def passenger(hook: _Hook) -> _Hook:
    """A hook that never raises because Lightning ran hooks in an order the record did not expect:
    the record notes the anomaly (``view.anomalies``) and warns once; Lightning carries on."""

    @functools.wraps(hook)
    def guarded(self: StageHooks, /, *args: Any, **kwargs: Any) -> None:
        try:
            hook(self, *args, **kwargs)
        except EventOrderError as error:
            self._anomaly(f"{hook.__name__}: {error}")

    return cast(_Hook, guarded)


def _evaluation_hooks(kind: str, name: str) -> tuple[Callable[..., None], ...]:
    """Lightning's hooks ``on_<name>_{start,epoch_start,batch_start,batch_end,epoch_end,end}`` of evaluation ``kind``:
    one code path for validate, test and predict. Lightning's sanity check counts nothing."""
    validation = kind == "validate"
    driver = operator.attrgetter(f"_{kind}")

    def start(self: StageHooks, trainer: pl.Trainer, pl_module: object) -> None:
        if validation and trainer.sanity_checking:
            return
        if trainer.state.fn == _FIT:
            self._train.settle()  # a train batch ended before this validation
        else:
            bind_lifetime(trainer.lightning_module, self.tracker.progress)
            self.tracker.progress.run_ready(kind)
            self.tracker.progress.run_started()
            self._run_begun = True

    def epoch_start(self: StageHooks, trainer: pl.Trainer, pl_module: object) -> None:
        if not (validation and trainer.sanity_checking):
            driver(self).epoch_begin()

    def batch_start(
        self: StageHooks, trainer: pl.Trainer, pl_module: object, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if not (validation and trainer.sanity_checking):
            driver(self).batch_begin(batch)

    def batch_end(
        self: StageHooks,
        trainer: pl.Trainer,
        pl_module: object,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if not (validation and trainer.sanity_checking):
            driver(self).batch_end(dataloader_idx)

    def epoch_end(self: StageHooks, trainer: pl.Trainer, pl_module: object) -> None:
        if not (validation and trainer.sanity_checking):
            driver(self).epoch_end()

    def end(self: StageHooks, trainer: pl.Trainer, pl_module: object) -> None:
        if validation and trainer.sanity_checking:
            return
        driver(self).settle()
        if trainer.state.fn != _FIT:
            self.tracker.progress.run_processed()
            self.tracker.progress.run_completed()
        if validation:
            self._rng.validation_ended()

    hooks = (start, epoch_start, batch_start, batch_end, epoch_end, end)
    for hook in hooks:
        hook.__name__ = hook.__qualname__ = f"on_{name}_{hook.__name__}"  # Lightning's name, in the anomalies noted
    return tuple(passenger(hook) for hook in hooks)


class StageHooks(CallbackBase):
    """Lightning's ``on_train_batch_*``, ``on_before_*`` and ``on_{validation,test,predict}_*`` hooks, for the
    callback's stage drivers."""

    tracker: Tracker
    _train: StageDriver
    _validate: StageDriver
    _test: StageDriver
    _predict: StageDriver
    _combined: CombinedBatches | None  # several train loaders
    _rng: ResumeRngChecks
    _trainer: Callable[[], pl.Trainer | None]
    _run_begun: bool  # this call's run is counted
    _anomaly: Callable[[str], None]
    _fit_schedulers: list[object]  # the schedulers counted, held until the fit ends

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
        self._rng.train_batch_start()
        if batch_idx == 0:  # after every on_train_epoch_start hook
            self._count_schedulers(trainer)

    def _count_schedulers(self, trainer: pl.Trainer) -> None:
        """Count the steps of the schedulers Lightning steps now (a callback may replace them at an epoch's start:
        ``StochasticWeightAveraging`` puts in its ``SWALR``); what those counted until now stepped stays counted:
        they are held until the fit ends (Lightning drops a replaced one before the tracker reads its last step)."""
        schedulers: list[object] = [c.scheduler for c in trainer.lr_scheduler_configs]
        count_scheduler_steps(self.tracker.progress.train, schedulers)
        self._fit_schedulers = schedulers

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        self._step_began("on_before_backward")

    def on_before_optimizer_step(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        self._step_began("on_before_optimizer_step")  # also in manual optimization after a plain loss.backward()

    def on_before_zero_grad(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        self._step_began("on_before_zero_grad")

    def _step_began(self, hook: str) -> None:
        """The batch's step began: Lightning marked it started (the first of these hooks in a batch marks it)."""
        train = self._train
        if train.batch_to_start:
            train.batch_to_start = False
            try:
                train.stage.batch_started()
            except EventOrderError as error:
                self._anomaly(f"{hook}: {error}")

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        try:
            if self._combined is not None:
                self._combined.batch_end(self._train, batch, self._trainer())
            elif batch is None and self._no_batch_begun():
                self._train.batch_of_none()  # the loader yielded None: Lightning ran no start hook and no step
            else:  # training_step(dataloader_iter) fetches its own batch: Lightning passes that one here
                self._train.batch_end(0, batch)
        except EventOrderError as error:
            self._anomaly(f"on_train_batch_end: {error}")

    def _no_batch_begun(self) -> bool:
        """No train batch was begun since the last one processed (Lightning ran no ``on_train_batch_start``)."""
        batches = self.tracker.progress.train.view.batches.lifetime
        return batches.ready == batches.processed

    # validate, test and predict: Lightning's six hooks of each, from one code path
    (
        on_validation_start,
        on_validation_epoch_start,
        on_validation_batch_start,
        on_validation_batch_end,
        on_validation_epoch_end,
        on_validation_end,
    ) = _evaluation_hooks("validate", "validation")
    on_test_start, on_test_epoch_start, on_test_batch_start, on_test_batch_end, on_test_epoch_end, on_test_end = (
        _evaluation_hooks("test", "test")
    )
    (
        on_predict_start,
        on_predict_epoch_start,
        on_predict_batch_start,
        on_predict_batch_end,
        on_predict_epoch_end,
        on_predict_end,
    ) = _evaluation_hooks("predict", "predict")
