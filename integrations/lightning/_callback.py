"""The ``ProgressTracker`` callback: keeps the core progress of a Trainer and saves it in Lightning's checkpoint."""

from __future__ import annotations

import os
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.hooks import RemovableHandle

from tracker_core import EventOrderError, InexactResumeWarning, ProgressStateError, Tracker, count_optimizer_steps
from tracker_core.adapter import (
    GlobalRng,
    abandon_in_flight,
    batches_in,
    bind_lifetime,
    capture_gradients,
    continue_run_scope,
    keep_heartbeat,
    read_heartbeat,
    reenter_last_run,
    restore_gradients,
    saved_elsewhere,
)
from tracker_core.adapter import register_progress as attach
from tracker_core.checkpoints import LIGHTNING_GRADIENTS_KEY, LIGHTNING_STATE_KEY
from tracker_core.integrations.lightning import _checkpoint_io as rank_parts
from tracker_core.integrations.lightning import _compat as resume
from tracker_core.integrations.lightning import _elastic as elastic
from tracker_core.integrations.lightning import _resume_warnings as inexact
from tracker_core.integrations.lightning._combined_batches import CombinedBatches
from tracker_core.integrations.lightning._loggers import LoggerRewind
from tracker_core.integrations.lightning._resume_rng import ResumeRngChecks, nothing
from tracker_core.integrations.lightning._stage_driver import StageDriver
from tracker_core.integrations.lightning._stage_hooks import _FIT, StageHooks, passenger

if TYPE_CHECKING:
    import pytorch_lightning as pl

STATE_KEY = LIGHTNING_STATE_KEY
"""Where the progress entry lives: ``checkpoint["callbacks"][STATE_KEY]``."""
GRADIENTS_KEY = LIGHTNING_GRADIENTS_KEY
"""``checkpoint[GRADIENTS_KEY]``: an unfinished accumulation window's partial gradients, one per parameter (with
several processes ``{"ranks": [each rank's list]}``)."""


class ProgressTracker(StageHooks):
    """Counts runs, epochs, batches, samples and optimizer steps of every stage; resumes exactly (docs/lightning.md).
    A passenger: its hooks never raise over Lightning's hook order nor change what it trains (``view.anomalies``).

    ``lifetime_from``: the progress entry (``checkpoint["callbacks"][STATE_KEY]``) of the checkpoint whose weights
    this run starts from without ``ckpt_path``: its lifetime counts continue, the run counts start at zero.
    ``count_tokens(batch)``: a batch's tokens, or ``(tokens, non_padding_tokens)`` (default: read from its
    ``input_ids`` and ``attention_mask``). ``heartbeat``: a file where rank 0 keeps the fit's heartbeat, so that a
    resumed fit's ledger says what the crashed run lost after the checkpoint (None: that loss is ``unknown``).
    ``rank_files``: with several processes, each rank's entry in its own file beside rank 0's checkpoint
    (``<checkpoint>.ranks/``), not all in it; a fit resuming such a checkpoint passes it too.
    """

    def __init__(
        self,
        lifetime_from: Mapping[str, Any] | None = None,
        count_tokens: Callable[[Any], int | tuple[int, int]] | None = None,
        heartbeat: str | os.PathLike[str] | None = None,
        rank_files: bool = False,
    ) -> None:
        self.tracker = Tracker()
        self._rank_files = rank_files
        self._count_tokens = count_tokens
        self._heartbeat = None if heartbeat is None else os.fspath(heartbeat)
        if lifetime_from is not None:
            if not isinstance(lifetime_from, Mapping) or "progress" not in lifetime_from:
                raise ProgressStateError("progress", "missing: pass checkpoint['callbacks'][STATE_KEY]")
            self.tracker.progress.load_lifetime(lifetime_from["progress"])
        self._drivers()
        self._trainer: Callable[[], pl.Trainer | None] = nothing
        self._step_hooks: list[RemovableHandle] = []
        self._fit_schedulers: list[object] = []  # held during the fit (see StageHooks._count_schedulers)
        self._gradients: list[torch.Tensor | None] | None = None  # loaded, restored at on_train_start
        self._loaded = False  # an entry was loaded; Lightning's restart not yet reconciled
        self._reenter = False  # a fit entry was loaded: on_fit_start re-enters its run
        self._restart: resume.Restart | None = None  # what Lightning's restart does with the fit checkpoint loaded
        self._resumed_untrained = False  # the last fit was resumed at max_steps: it trained nothing
        self._closed_at_restart: int | None = None  # resumed at this epoch's last batch: Lightning closes it
        self._rng = ResumeRngChecks()
        self._elastic_entry: dict[str, Any] | None = None  # saved at another world size: loaded at setup_data
        self._train_loaders: list[object] = []  # held: the tracker's positions need them until the next fit
        self._combined: CombinedBatches | None = None  # several train loaders
        self._run_begun = False  # this call's run is counted (a call that runs no loop is counted at teardown)
        self._fit_starting = False  # between a fit's setup and on_fit_start (where Lightning's tuners run)
        self._saved_starting = False  # this fit saved a checkpoint there: a tuner's, which it restores (an undo)
        self._new_fit = False  # this fit starts Lightning's fit counters afresh
        self._cut_by = ""  # an exception ended the last call: what, and in which call (settled at the next call)
        self._validation_restart = ""  # read from a fit checkpoint's loops: see validation_at_load
        # where the train run scope of this Trainer's fit began (what continue_run_scope returned)
        self._fit_scope: tuple[int, int, tuple[tuple[int, ...], ...]] | None = None
        self._loggers = LoggerRewind()

    @property
    def log(self) -> Callable[..., None] | None:
        """The LightningModule's ``log``, which Lightning gives every callback when a run starts."""
        return self.__dict__.get("_log")

    @log.setter
    def log(self, log: Callable[..., None]) -> None:
        """Lightning assigns the module's ``log`` at the start of each run, before it opens the loggers."""
        self.__dict__["_log"] = log
        trainer = resume.trainer_of_log(log)
        if trainer is not None:
            self._loggers.loggers_opening(trainer)

    def _drivers(self) -> None:
        progress = self.tracker.progress
        stages = (progress.train, progress.validate, progress.test, progress.predict)
        self._train, self._validate, self._test, self._predict = (StageDriver(s, self._count_tokens) for s in stages)

    def _reset_drivers(self) -> None:
        for driver in (self._train, self._validate, self._test, self._predict):
            driver.reset()

    @property
    def state_key(self) -> str:
        return STATE_KEY

    def _anomaly(self, message: str) -> None:
        """Record what the counts could not follow; warn the first time only."""
        self.tracker.progress.note_anomaly(message, framework="Lightning")

    # pickling (torch.save(trainer), copy.deepcopy(trainer), ddp_spawn) ------------------------
    def __getstate__(self) -> dict[str, Any]:
        """Plain data: the progress state instead of the live record, no trainer reference or optimizer hooks."""
        drivers = ("_train", "_validate", "_test", "_predict")
        state = {name: value for name, value in self.__dict__.items() if name not in drivers}
        live: dict[str, object] = {"_trainer": nothing, "_step_hooks": [], "_train_loaders": [], "_fit_schedulers": []}
        return {**state, **live, "tracker": self.tracker.progress.state_dict()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        progress = state.pop("tracker")
        self.__dict__.update(state)
        self.tracker = Tracker()
        self.tracker.progress.load_state_dict(progress)
        self._drivers()

    # setup / teardown -------------------------------------------------------------------------
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._trainer = weakref.ref(trainer)
        self._run_begun = False  # read at teardown, which Lightning skips after an exception
        self._rng.setup(trainer)
        if self._cut_by:  # an exception ended the last call: close what it cut (a fit's run stays open)
            self._reset_drivers()
            cut_by, self._cut_by = self._cut_by, ""
            cut = abandon_in_flight(self.tracker.progress, reenter=cut_by.endswith(f" in {_FIT}"))
            if cut:
                self.tracker.progress.note_anomaly(f"{cut_by} cut: {cut}")
        attach(trainer, self.tracker.progress)
        if self._rank_files:
            rank_parts.wrap_checkpoint_io(trainer)  # each rank's entry in its own file beside the checkpoint
        self._fit_starting, self._saved_starting = stage == _FIT, False
        if stage == _FIT:
            fit_loop = trainer.fit_loop
            resume.hook_setup_data(fit_loop, self._track_train_loaders, self._setup_data_returned, self._anomaly)

    def _setup_data_returned(self) -> None:
        """Lightning's ``setup_data`` built the train iterators: undo a resumed build's draws (not the global RNGs'
        where it prefetched a batch, for a loader without a length: the RNG check names those)."""
        trainer = self._trainer()
        if trainer is not None and resume.train_iterator(trainer.fit_loop) is not None:  # none when it trains nothing
            prefetched = any(batches_in(loader) is None for loader in self._train_loaders)
            self.tracker.train_iterators_built(prefetched=prefetched)
        self._rng.setup_data_returned()

    @passenger
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._release_fit_objects()
        self._rng.after_cut = None
        kind = str(getattr(stage, "value", stage))  # Lightning passes its TrainerFn (a str enum)
        if kind != _FIT and not self._run_begun:  # Lightning skipped a loop over zero batches: still a run
            progress = self.tracker.progress
            progress.run_ready(kind)
            progress.run_started()
            progress.run_processed()
            progress.run_completed()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        """Note the exception; what it cut is closed at the next call on this Trainer, so that a checkpoint written
        after it (``OnExceptionCheckpoint``) holds the record as it was, as Lightning's loops do."""
        self._release_fit_objects()
        self.tracker.progress.note_run_end("interrupted" if isinstance(exception, KeyboardInterrupt) else "crashed")
        self._cut_by = f"{type(exception).__name__} in {getattr(trainer.state.fn, 'value', trainer.state.fn)}"

    def _release_fit_objects(self) -> None:
        """Remove the optimizer step hooks and let go of the schedulers held during the fit."""
        for handle in self._step_hooks:
            handle.remove()
        self._step_hooks, self._fit_schedulers = [], []

    # fit -------------------------------------------------------------------------------------
    @passenger
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._fit_starting = self._saved_starting = False
        resume.fit_starts(trainer.fit_loop)
        self._loggers.forget()
        progress = self.tracker.progress
        bind_lifetime(pl_module, progress)  # a model that carries its lifetime (track_lifetime) continues it
        # Lightning restores its loop counters after this hook: a loaded entry says they will carry on
        loaded, self._reenter = self._reenter, False
        carry_on = loaded or resume.fit_counters_carry_on(trainer)
        self._new_fit = not carry_on
        reentered = carry_on and reenter_last_run(progress, _FIT)
        progress.run_ready(_FIT)
        if carry_on and not reentered:
            if self._fit_scope is not None and not loaded:  # validate/test/predict came in between
                continue_run_scope(progress.train, self._fit_scope)
            else:  # a loaded checkpoint's counters are Lightning's once it restored its loops, after this hook
                restart = self._restart if loaded else None
                step = trainer.global_step if restart is None else restart.global_step
                epoch = trainer.current_epoch if restart is None else restart.epoch
                self._anomaly(
                    f"this fit continues Lightning's counters of an earlier fit (global_step {step}, epoch {epoch}) "
                    "that the record did not count as its last run: run-scope counts start at 0"
                )
        self._fit_scope = continue_run_scope(progress.train)  # re-entered: where the continued run's scope began
        progress.run_started()
        self._run_begun = True
        self._release_fit_objects()
        self._step_hooks = count_optimizer_steps(progress.train, trainer.optimizers)

    def _track_train_loaders(self, loaders: list[object]) -> bool:
        """Lightning is about to iterate its train loaders; True if that begins the next epoch. After a load, maybe
        before Lightning restored its loops (``estimated_stepping_batches``): its restart comes from the checkpoint."""
        trainer = self._trainer()
        loaded, self._loaded = self._loaded, False
        restart, self._restart = self._restart, None
        untrained, self._resumed_untrained = self._resumed_untrained, False
        self._train_loaders = list(loaders)
        if trainer is None:  # never: Lightning sets up the data after this callback's setup on its Trainer
            return False
        layout = resume.train_layout(trainer.fit_loop)
        self._combined = None if layout is None else CombinedBatches(layout)
        if not loaded:
            _continue_unloaded(self.tracker, self._train, trainer, untrained)
        if loaded:  # before the positions note the RNGs that they put back after the iterator's build
            self._rng.undo_loader_builds(loaders)
        for index, loader in enumerate(loaders):  # Lightning's loops restore a loader's own state
            self.tracker.track_train_loader(loader, index, framework_restores_state=True)
        if self._new_fit:  # a checkpoint before its first batch holds the RNGs of now (before_build)
            self.tracker.train_iterators_building()
        if not loaded:
            return False
        if self._elastic_entry is not None:
            entry, self._elastic_entry = self._elastic_entry, None
            elastic.load(self.tracker, entry, loaders, trainer)
            self.tracker.progress.run_ready(_FIT)  # re-enter the restored run, as on_fit_start does after a load
            self.tracker.progress.run_started()
            self._rng.loaded()
        check = self._rng.before_first_iter()  # Lightning is about to build the resumed run's train iterator
        if restart is None:  # loaded without a checkpoint of Lightning's: its loops start afresh
            restart = resume.Restart(trainer.global_step)
        finished = resume.reached_max_steps(trainer, restart.global_step)  # Lightning trains nothing
        self._resumed_untrained = finished
        in_flight = self.tracker.view.train.epochs.lifetime.in_flight
        if finished and in_flight:
            inexact.warn_epoch_left_open(self.tracker, trainer)
        epoch_over = restart.epoch_consumed and in_flight and not finished
        if epoch_over:  # Lightning's next iteration of these loaders is the next epoch, as in the uninterrupted run
            self.tracker.forget_loaded_positions()
        if restart.no_epoch_counted and not finished and in_flight:
            inexact.warn_epoch_uncounted(self.tracker, restart.epoch_consumed)  # (after a finished fit none is)
        if restart.closes_epoch and not finished:  # Lightning counts it finished and starts the next, without hooks
            self._train.close_epoch()
            self._closed_at_restart = None if restart.no_epoch_counted else restart.epoch
            if epoch_over and not restart.no_epoch_counted:  # it builds that epoch's iterator before its set_epoch
                resume.set_sampler_epoch(loaders, restart.epoch + 1)
        inexact.warn_restored_loaders(restart.cut_batch, loaders)
        view = self.tracker.view
        continues = view.is_mid_epoch and not restart.epoch_consumed
        restarts = not all(resume.has_own_state(loader) for loader in loaders)  # plain ones
        self._rng.await_build(check, view.epoch_index if continues else None, finished, restarts)
        if view.is_mid_epoch and not epoch_over:
            inexact.warn_if_restored_ahead(loaders)
        return epoch_over and restart.closes_epoch

    @passenger
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # from the state Lightning restored before this hook (a restored last_epoch is no step)
        self._count_schedulers(trainer)
        self._rng.arm_first_batch_check(trainer)
        closed, self._closed_at_restart = self._closed_at_restart, None
        built = None if closed is None else resume.validation_built_at_restart(trainer, closed)
        if closed is not None and built is not None:
            if built.persistent_workers:  # its validation reuses it
                inexact.warn_validation_built_at_restart(closed, persistent=True)
            else:
                self._rng.await_validation_build(closed)
        if self._gradients is not None:
            restore_gradients(pl_module.parameters(), self._gradients)
            self._gradients = None
        # beats from the run's start: a process killed before its first save is recorded
        keep_heartbeat(self.tracker.progress, self._heartbeat)

    @passenger
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._train.epoch_begin()
        self._rng.train_epoch_start(trainer)

    @passenger
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._train.epoch_end()

    @passenger
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._train.settle()
        self.tracker.progress.run_processed()

    @passenger
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._release_fit_objects()
        self._train.settle()
        progress = self.tracker.progress
        runs = progress.view.run.counts
        if runs.processed != runs.started:  # a fit that trained nothing: no on_train_start/end
            progress.run_processed()
            self._rng.undo_setup_draws()  # resumed: nothing read the iterator Lightning built in setup_data
            if self._resumed_untrained and self.tracker.view.is_mid_epoch and self.tracker.resume_loaded_again():
                # its train loaders back at the loaded position, as loaded: a save holds it, not a new epoch's
                for index, loader in enumerate(self._train_loaders):
                    self.tracker.track_train_loader(loader, index, framework_restores_state=True)
                resume.put_back_loaded_states(trainer.fit_loop)
        if trainer.should_stop:  # told to stop (EarlyStopping, the module) before max_epochs / max_steps
            progress.note_run_end("stopped_early")
        progress.run_completed()

    # checkpoints -----------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The core's entry, caught up with what Lightning marked before our hook ran (with several processes a
        collective, gathering every rank's)."""
        trainer = self._trainer()
        self._saved_starting = self._fit_starting
        if trainer is not None and trainer.state.fn == _FIT:
            try:
                self._catch_up(trainer)
            except EventOrderError as error:
                self._anomaly(f"checkpoint: {error}")
            if self.tracker.view.validate.epochs.lifetime.in_flight:
                inexact.warn_saved_in_validation()
            # Lightning knows the epoch's last batch (it fetched ahead), where a loader's length may be unknown.
            epoch_ended = resume.on_train_batch_end(trainer) and trainer.is_last_batch
            unread = self._new_fit and resume.no_batch_fetched(trainer)  # a resumed fit builds its iterator again
            return self.tracker.checkpoint_state_dict(epoch_ended=epoch_ended, before_build=unread)
        return self.tracker.checkpoint_state_dict()

    def _catch_up(self, trainer: pl.Trainer) -> None:
        """A checkpoint taken in an end hook that ran before ours: mark what Lightning already marked."""
        train = self.tracker.progress.train
        batches, epochs_mine = train.view.batches.lifetime, train.view.epochs.lifetime
        if resume.on_train_batch_end(trainer) and batches.ready != batches.processed:
            if self._combined is not None:
                self._combined.batch_end(self._train, self._combined.batch, trainer)
            else:
                self._train.batch_end()
        epochs: Any = trainer.fit_loop.epoch_progress.current
        in_epoch_end = epochs.ready == epochs.started == epochs.processed == epochs.completed + 1
        if in_epoch_end and epochs_mine.ready != epochs_mine.processed:
            self._train.epoch_end()

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if trainer.state.fn != _FIT:
            return
        keep_heartbeat(self.tracker.progress, self._heartbeat)
        # gradients the next step adds to: in an accumulation window, or any left with several optimizers (one may
        # accumulate by hand while another steps: the record's window closes at each step)
        pending = self.tracker.view.is_mid_accumulation or (
            len(trainer.optimizers) > 1
            and any(p.grad is not None and bool(p.grad.any()) for p in pl_module.parameters())
        )
        gradients = capture_gradients(pl_module.parameters()) if pending else None
        if trainer.world_size > 1:
            gradients = rank_parts.every_rank(gradients)
        if gradients is not None:
            checkpoint[GRADIENTS_KEY] = gradients
        inexact.warn_inexact_save(self.tracker, trainer, None if self._combined is None else self._combined.layout)
        batches: Any = trainer.fit_loop.epoch_loop.batch_progress.current  # typed as a tracker without these phases
        cut = batches.ready - 1 if batches.ready > batches.processed else None
        inexact.warn_restored_loaders(cut, self._train_loaders)

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if self._restores_tuner_checkpoint():
            return
        rank_parts.refuse_unread_rank_files(checkpoint.get("callbacks", {}).get(STATE_KEY), self._rank_files)
        if STATE_KEY not in checkpoint.get("callbacks", {}):
            warnings.warn(
                f"the checkpoint has no progress entry (checkpoint['callbacks'][{STATE_KEY!r}]): progress "
                "restarts from zero and the train data from its first batch",
                InexactResumeWarning,
                stacklevel=2,
            )
            self._train.epoch_to_open = True  # Lightning may resume mid-epoch, without on_train_epoch_start
        if trainer.state.fn == _FIT:
            self._restart = resume.restart_of(checkpoint)
            resume.loader_states_loaded(trainer.fit_loop, checkpoint)
            read_heartbeat(self.tracker.progress, self._heartbeat)  # the lost work of the run that saved it
            self._gradients = rank_parts.own_gradients(checkpoint.get(GRADIENTS_KEY), trainer.global_rank)
            self._validation_restart = "finish" if self._restart.finishes_validation else "skip"
            self._loggers.rewind(trainer, checkpoint)  # the loggers continue at the checkpoint's step

    def _restores_tuner_checkpoint(self) -> bool:
        """True for a checkpoint this fit saved before its start, loaded there: Lightning's tuners (``BatchSizeFinder``,
        ``LearningRateFinder``) save one, run their trials without callbacks and restore it; the record never left
        it, and Lightning alone leaves the trials' RNG draws and loader states in place: nothing is loaded."""
        return self._fit_starting and self._saved_starting

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load the entry (``ProgressStateError`` on damage, before anything runs); an evaluation loads only this
        rank's progress, a fit's entry of another world size waits for the train loaders (``_elastic``)."""
        if self._restores_tuner_checkpoint():
            return
        rank_parts.refuse_unread_rank_files(state_dict, self._rank_files)
        trainer = self._trainer()
        self._elastic_entry = None
        self._cut_by = ""  # the loaded record replaces what an exception cut
        if trainer is not None and trainer.state.fn != _FIT:
            if self.tracker.view.run.counts.ready == 0:  # a record of its own goes on: it counts this Trainer's runs
                rank_parts.load_progress_only(self.tracker, state_dict, trainer.global_rank)
        elif trainer is None or not saved_elsewhere(state_dict):
            self.tracker.load_state_dict(state_dict)
            self._rng.loaded()
            restart, self._validation_restart = self._validation_restart, ""
            if inexact.validation_at_load(self.tracker, restart, state_dict["progress"]) and trainer is not None:
                self._rng.after_cut = GlobalRng.capture()  # put back when that validation ends
                inexact.warn_validation_reread(self.tracker)
        else:
            self._elastic_entry = state_dict
        self._reset_drivers()
        self._loaded = self._reenter = trainer is None or trainer.state.fn == _FIT


def _continue_unloaded(tracker: Tracker, train: StageDriver, trainer: pl.Trainer, untrained: bool) -> None:
    """A fit with nothing loaded, continued after a resumed one (``untrained``: that trained nothing)."""
    if resume.closes_restored_epoch(trainer.fit_loop) and not resume.reached_max_steps(trainer):
        train.close_epoch()
    # mid-epoch, its data resumes at the checkpoint's position, as fit(ckpt_path=...) would
    if untrained and tracker.view.is_mid_epoch:
        if tracker.resume_loaded_again():
            resume.load_loader_states_again(trainer.fit_loop)  # a loader's own state: where it was loaded
        else:
            inexact.warn_continues_untrained()
