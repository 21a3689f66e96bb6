"""PyTorch Lightning adapter: a Callback that keeps the core progress and saves it in Lightning's checkpoint.

Add ``ProgressTracker()`` to ``Trainer(callbacks=[...])``; read progress anywhere with
``tracker_core.get_progress(trainer)`` (in a LightningModule: ``get_progress(self.trainer)``).
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Mapping
from typing import Any

import pytorch_lightning as pl
import torch
import torch.distributed as dist
from pytorch_lightning.trainer.states import TrainerFn
from torch.utils.data import DataLoader
from torch.utils.hooks import RemovableHandle

from tracker_core import InexactResumeWarning, ProgressStateError, Tracker, count_optimizer_steps
from tracker_core.adapter import GlobalRng, capture_gradients, count_scheduler_steps, restore_gradients, saved_elsewhere
from tracker_core.adapter import register_progress as attach
from tracker_core.integrations._checkpoint_files import LIGHTNING_GRADIENTS_KEY, LIGHTNING_STATE_KEY
from tracker_core.integrations.lightning import _compat as resume
from tracker_core.integrations.lightning import _elastic as elastic
from tracker_core.integrations.lightning._stage_driver import StageDriver

__all__ = ["GRADIENTS_KEY", "STATE_KEY", "ProgressTracker"]

STATE_KEY = LIGHTNING_STATE_KEY
"""Where the progress entry lives: ``checkpoint["callbacks"][STATE_KEY]``."""
GRADIENTS_KEY = LIGHTNING_GRADIENTS_KEY
"""Where the partial gradients of an unfinished accumulation window live: ``checkpoint[GRADIENTS_KEY]``.

A list (one per parameter); with several processes ``{"ranks": [each rank's list]}``.
"""


class ProgressTracker(pl.Callback):
    """Counts runs, epochs, batches, samples and optimizer steps of every stage; resumes exactly.

    ``lifetime_from``: the progress entry of an earlier checkpoint
    (``checkpoint["callbacks"][STATE_KEY]``) whose weights this run starts from without
    ``ckpt_path``; its lifetime counts continue, the run counts start at zero.
    """

    def __init__(self, lifetime_from: Mapping[str, Any] | None = None) -> None:
        self.tracker = Tracker()
        progress = self.tracker.progress
        if lifetime_from is not None:
            if not isinstance(lifetime_from, Mapping) or "progress" not in lifetime_from:
                raise ProgressStateError("progress", "missing: pass checkpoint['callbacks'][STATE_KEY]")
            progress.load_lifetime(lifetime_from["progress"])
        self._train = StageDriver(progress.train)
        self._validate = StageDriver(progress.validate)
        self._test = StageDriver(progress.test)
        self._predict = StageDriver(progress.predict)
        self._trainer: weakref.ref[pl.Trainer] | None = None
        self._step_hooks: list[RemovableHandle] = []
        self._gradients: list[torch.Tensor | None] | None = None  # loaded, restored at on_train_start
        self._loaded = False  # an entry was loaded; Lightning's restart not yet reconciled
        self._rng_at_setup: GlobalRng | None = None  # after a load, before Lightning's setup_data iter()
        self._elastic_entry: dict[str, Any] | None = None  # saved at another world size: loaded at setup_data

    @property
    def state_key(self) -> str:
        return STATE_KEY

    # setup / teardown -------------------------------------------------------------------------
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._trainer = weakref.ref(trainer)
        attach(trainer, self.tracker.progress)
        if stage == "fit":
            resume.hook_before_first_iter(trainer.fit_loop, self._track_train_loaders)

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._remove_step_hooks()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._remove_step_hooks()

    def _remove_step_hooks(self) -> None:
        for handle in self._step_hooks:
            handle.remove()
        self._step_hooks = []

    # fit -------------------------------------------------------------------------------------
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        progress = self.tracker.progress
        progress.run_ready("fit")
        progress.run_started()
        self._remove_step_hooks()
        self._step_hooks = count_optimizer_steps(progress.train, trainer.optimizers)
        schedulers = [config.scheduler for config in trainer.lr_scheduler_configs]
        self._step_hooks += count_scheduler_steps(progress.train, schedulers)

    def _track_train_loaders(self, loaders: list[object]) -> None:
        """Lightning set up its train loaders and is about to iterate them (see ``hook_before_first_iter``)."""
        trainer = self._trainer() if self._trainer is not None else None
        loaded, self._loaded = self._loaded, False
        for index, loader in enumerate(loaders):
            self.tracker.track_train_loader(loader, index)
        if not loaded or trainer is None:
            return
        if self._elastic_entry is not None:
            entry, self._elastic_entry = self._elastic_entry, None
            elastic.load(self.tracker, entry, loaders, trainer.fit_loop)
            self.tracker.progress.run_ready("fit")  # re-enter the restored run, as on_fit_start does after a load
            self.tracker.progress.run_started()
        self._rng_at_setup = GlobalRng.capture()
        if resume.restored_epoch_consumed(trainer.fit_loop) and self.tracker.view.train.epochs.lifetime.in_flight:
            # Lightning's next iteration of these loaders is the next epoch: finish the restored
            # one now (its replay yields nothing), as the uninterrupted run had.
            for loader in loaders:
                if isinstance(loader, DataLoader):
                    next(iter(loader), None)
        if resume.closes_restored_epoch(trainer.fit_loop):
            # Lightning counts the restored epoch as finished without its end hooks, and starts
            # the next one without its start hooks: so do we.
            train = self.tracker.progress.train
            train.epoch_processed()
            train.epoch_completed()
            self._train.epoch_to_open = True

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._gradients is not None:
            restore_gradients(pl_module.parameters(), self._gradients)
            self._gradients = None

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._train.epoch_begin()
        if self._rng_at_setup is not None:
            rng, self._rng_at_setup = self._rng_at_setup, None
            if resume.discards_setup_iterator(trainer):
                rng.apply()  # undo the draws of the iterator Lightning built in setup_data and drops now

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._train.batch_begin(batch)
        self._rng_at_setup = None  # Lightning iterates the setup_data iterator: its draws stand

    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor) -> None:
        self._train.batch_step()

    def on_before_zero_grad(self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any) -> None:
        self._train.batch_step()

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._train.batch_end()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._train.epoch_end()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._train.settle()
        self.tracker.progress.run_processed()

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.tracker.progress.run_completed()
        self._remove_step_hooks()

    # validate / test / predict -------------------------------------------------------------
    def _evaluation_start(self, trainer: pl.Trainer, kind: str) -> None:
        if trainer.state.fn == TrainerFn.FITTING:
            self._train.settle()  # a train batch ended before this validation
        else:
            self.tracker.progress.run_ready(kind)
            self.tracker.progress.run_started()

    def _evaluation_end(self, trainer: pl.Trainer, driver: StageDriver) -> None:
        driver.settle()
        if trainer.state.fn != TrainerFn.FITTING:
            self.tracker.progress.run_processed()
            self.tracker.progress.run_completed()

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._evaluation_start(trainer, "validate")

    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._validate.epoch_begin()

    def on_validation_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if not trainer.sanity_checking:
            self._validate.batch_begin(batch)

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

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._validate.epoch_end()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._evaluation_end(trainer, self._validate)

    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._evaluation_start(trainer, "test")

    def on_test_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._test.epoch_begin()

    def on_test_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._test.batch_begin(batch)

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

    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._test.epoch_end()

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._evaluation_end(trainer, self._test)

    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._evaluation_start(trainer, "predict")

    def on_predict_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._predict.epoch_begin()

    def on_predict_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._predict.batch_begin(batch)

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

    def on_predict_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._predict.epoch_end()

    def on_predict_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._evaluation_end(trainer, self._predict)

    # checkpoints -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The core's plain entry, after catching up with phases Lightning marked before our hook ran.

        With several processes it holds every rank's entry, so the file rank 0 writes resumes
        each rank exactly: then it is a collective, which Lightning calls on every rank
        (``Trainer.save_checkpoint``).
        """
        trainer = self._trainer() if self._trainer is not None else None
        if trainer is not None and trainer.state.fn == TrainerFn.FITTING:
            self._catch_up(trainer)
        return self.tracker.checkpoint_state_dict()

    def _catch_up(self, trainer: pl.Trainer) -> None:
        """A checkpoint taken in an end hook that ran before ours: mark what Lightning already marked."""
        train = self.tracker.progress.train
        batches, epochs_mine = train.view.batches.lifetime, train.view.epochs.lifetime
        if resume.on_train_batch_end(trainer) and batches.ready != batches.processed:
            self._train.batch_end()
        epochs = trainer.fit_loop.epoch_progress.current
        in_epoch_end = epochs.ready == epochs.started == epochs.processed == epochs.completed + 1
        if in_epoch_end and epochs_mine.ready != epochs_mine.processed:
            self._train.epoch_end()

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if trainer.state.fn != TrainerFn.FITTING:
            return
        if self.tracker.view.is_mid_accumulation:
            gradients = capture_gradients(pl_module.parameters())
            checkpoint[GRADIENTS_KEY] = _every_rank(gradients) if trainer.world_size > 1 else gradients
        if resume.on_train_batch_end(trainer) and resume.validation_due(trainer):
            warnings.warn(
                "checkpoint saved in on_train_batch_end before a due validation: Lightning skips that "
                "validation when resuming from it, so the resumed run will not validate there (its "
                "validation counts and any randomness the validation draws differ from an uninterrupted run)",
                InexactResumeWarning,
                stacklevel=2,
            )

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if STATE_KEY not in checkpoint.get("callbacks", {}):
            warnings.warn(
                f"the checkpoint has no progress entry (checkpoint['callbacks'][{STATE_KEY!r}]): progress "
                "restarts from zero and the train data from its first batch",
                InexactResumeWarning,
                stacklevel=2,
            )
            self._train.epoch_to_open = True  # Lightning may resume mid-epoch, without on_train_epoch_start
        self._gradients = _own_gradients(checkpoint.get(GRADIENTS_KEY), trainer.global_rank)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load the entry (``ProgressStateError`` on damage, before anything runs) and re-arm the hooks.

        An entry saved at another world size is mapped onto the train loaders, so it is loaded
        when Lightning has set them up, still before any batch runs (``_lightning_elastic``).
        """
        trainer = self._trainer() if self._trainer is not None else None
        self._elastic_entry = None
        if trainer is None or not saved_elsewhere(state_dict):
            self.tracker.load_state_dict(state_dict)
        elif trainer.state.fn == TrainerFn.FITTING:
            self._elastic_entry = state_dict
        else:  # validate/test/predict train nothing: no data position to map
            self.tracker.load_for_evaluation(state_dict)
        progress = state_dict.get("progress")
        where = progress.get("where") if isinstance(progress, dict) else None
        if isinstance(where, dict) and where.get("stage") == "validate":
            warnings.warn(
                "checkpoint saved during a validation: Lightning resumes training without finishing that "
                "validation, so it is not counted; training itself resumes exactly",
                InexactResumeWarning,
                stacklevel=2,
            )
        for driver in (self._train, self._validate, self._test, self._predict):
            driver.reset()
        self._loaded = True


def _every_rank(gradients: list[torch.Tensor | None]) -> dict[str, list[list[torch.Tensor | None]]]:
    """``{"ranks": [rank 0's gradients, ...]}`` (collective): DDP's ``no_sync`` leaves each rank its own partial sums."""
    ranks: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(ranks, [None if g is None else g.cpu() for g in gradients])
    return {"ranks": ranks}


def _own_gradients(saved: object, rank: int) -> Any:
    """This rank's saved partial gradients (rank ``rank % saved ranks`` at another world size, as its RNGs)."""
    if not isinstance(saved, dict):
        return saved  # saved by one process (or absent)
    ranks = saved.get("ranks")
    if not isinstance(ranks, list) or not ranks:
        raise ProgressStateError("gradients.ranks", "expected a non-empty list of each rank's gradients")
    return ranks[rank % len(ranks)]
