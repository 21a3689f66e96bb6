"""PyTorch Lightning adapter: a Callback that keeps the core progress and saves it in Lightning's checkpoint.

Add ``ProgressTracker()`` to ``Trainer(callbacks=[...])``; read progress anywhere with
``tracker_core.get_progress(trainer)`` (in a LightningModule: ``get_progress(self.trainer)``).
"""

from __future__ import annotations

import functools
import os
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec

import torch
from torch.utils.data import DataLoader
from torch.utils.hooks import RemovableHandle

from tracker_core import EventOrderError, InexactResumeWarning, ProgressStateError, Tracker, count_optimizer_steps
from tracker_core.adapter import (
    GLOBAL_GENERATORS,
    GlobalRng,
    RankFiles,
    RankTensors,
    ResumeRngCheck,
    abandon_in_flight,
    begin_dataloader_pass,
    bind_lifetime,
    capture_gradients,
    continue_run_scope,
    count_dataloader_batch,
    count_scheduler_steps,
    gather_to_writer,
    keep_heartbeat,
    read_heartbeat,
    reenter_evaluation_epoch,
    reenter_last_run,
    restore_gradients,
    run_scope_bases,
    samples_in,
    saved_elsewhere,
)
from tracker_core.adapter import register_progress as attach
from tracker_core.checkpoints import LIGHTNING_GRADIENTS_KEY, LIGHTNING_STATE_KEY
from tracker_core.integrations.lightning import _compat as resume
from tracker_core.integrations.lightning import _elastic as elastic
from tracker_core.integrations.lightning._bases import CallbackBase
from tracker_core.integrations.lightning._checkpoint_io import wrap_checkpoint_io
from tracker_core.integrations.lightning._loggers import LoggerRewind
from tracker_core.integrations.lightning._stage_driver import StageDriver

if TYPE_CHECKING:
    import pytorch_lightning as pl

_P = ParamSpec("_P")
_FIT = "fit"  # trainer.state.fn while fitting (Lightning's TrainerFn is a str enum in both packages)
_SEED_BEFORE = "Trainer.fit(ckpt_path=...)"  # where a resumed fit's RNGs are restored (the RNG check's advice)
_AT_TRAIN_START = "in an on_train_start hook of the resumed fit, before its first batch"
_AT_EPOCH_BOUNDARY = (
    "in an on_train_start or on_train_epoch_start hook of a fit resumed at an epoch boundary (Lightning built "
    "that epoch's train iterator, which draws from it, before these hooks; the uninterrupted run builds it "
    "after them, so even a draw both runs make there differs: draw per-epoch values from a torch.Generator "
    "of your own)"
)

__all__ = ["GRADIENTS_KEY", "STATE_KEY", "ProgressTracker"]

STATE_KEY = LIGHTNING_STATE_KEY
"""Where the progress entry lives: ``checkpoint["callbacks"][STATE_KEY]``."""
GRADIENTS_KEY = LIGHTNING_GRADIENTS_KEY
"""Where the partial gradients of an unfinished accumulation window live: ``checkpoint[GRADIENTS_KEY]``.

A list (one per parameter); with several processes ``{"ranks": [each rank's list]}``.
"""


def _passenger(
    hook: Callable[Concatenate[ProgressTracker, _P], None],
) -> Callable[Concatenate[ProgressTracker, _P], None]:
    """A hook that never raises because Lightning ran hooks in an order the record did not expect:
    the record notes the anomaly (``view.anomalies``) and warns once; Lightning carries on."""

    def guarded(self: ProgressTracker, /, *args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            hook(self, *args, **kwargs)
        except EventOrderError as error:
            self._anomaly(f"{hook.__name__}: {error}")

    functools.update_wrapper(guarded, hook)
    return guarded


class ProgressTracker(CallbackBase):
    """Counts runs, epochs, batches, samples and optimizer steps of every stage; resumes exactly.

    A passenger: its hooks never raise because of the order Lightning runs them in, and never
    change what Lightning trains. Where Lightning carries on in a way its hooks do not say (an
    exception, a finished fit continued), the record re-synchronises to Lightning's counters,
    or notes the anomaly (``view.anomalies``) and warns once.

    ``lifetime_from``: the progress entry of an earlier checkpoint
    (``checkpoint["callbacks"][STATE_KEY]``) whose weights this run starts from without
    ``ckpt_path``; its lifetime counts continue, the run counts start at zero.

    Each stage counts the tokens of its batches: ``count_tokens(batch)`` (all tokens, or
    ``(tokens, non_padding_tokens)``) when given, else a batch's ``input_ids`` and ``attention_mask``.

    ``heartbeat``: the path of a file where rank 0 keeps the fit's heartbeat (from ``on_train_start``, at
    optimizer steps and saves), read when a fit resumes from a checkpoint: the resumed run's ledger then
    says what the crashed run lost after that checkpoint. None (the default): no file; that loss is ``unknown``.

    ``rank_files``: with several processes, rank 0's checkpoint keeps rank 0's entry and an index, and each
    rank's entry goes to ``<checkpoint>.ranks/<save_id>/rank-<r>.json`` beside it (the strategy's
    ``checkpoint_io`` is wrapped, ``_checkpoint_io``); a fit resuming such a checkpoint passes it too. False
    (the default): rank 0's checkpoint holds every rank's entry and nothing else is written.
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
        self._trainer: weakref.ref[pl.Trainer] | None = None
        self._step_hooks: list[RemovableHandle] = []
        self._gradients: list[torch.Tensor | None] | None = None  # loaded, restored at on_train_start
        self._loaded = False  # an entry was loaded; Lightning's restart not yet reconciled
        self._reenter = False  # a fit entry was loaded: on_fit_start re-enters its run
        self._restart: resume.Restart | None = None  # what Lightning's restart does with the fit checkpoint loaded
        self._resumed_untrained = False  # the last fit was resumed at max_steps: it trained nothing
        self._rng_at_setup: GlobalRng | None = None  # after a load, before Lightning's setup_data iter()
        self._rng_check: ResumeRngCheck | None = None  # a fit loaded: the RNGs it restored, until compared
        self._rng_check_at_run: ResumeRngCheck | None = None  # compared when Lightning first runs a train epoch
        self._rng_check_epoch = 0  # ... if it is this one (Lightning may go on with the next one)
        self._rng_check_at_start: ResumeRngCheck | None = None  # mid-epoch: set up at on_train_start
        self._rng_boundary = False  # resumed at an epoch boundary: its check is set up at on_train_start
        self._rng_await_build = False  # a check waits for Lightning's setup_data to build the train iterator
        self._rng_built: GlobalRng | None = None  # epoch boundary: the RNGs as that build (and prefetch) left them
        # the train iterator it built (that epoch must read from it), held weakly: Lightning drops it at teardown, and
        # with it the loader's worker processes
        self._rng_iterator: Callable[[], object] = _nothing
        self._rng_check_where = ""  # what the epoch-run check names
        self._rng_check_generators: tuple[str, ...] = GLOBAL_GENERATORS  # those the checks above compare
        self._rng_check_unmoved: ResumeRngCheck | None = None  # epoch boundary: the others, before on_train_epoch_start
        self._rng_after_cut: GlobalRng | None = None  # loaded inside a validation batch: see _cut_validation_ended
        self._elastic_entry: dict[str, Any] | None = None  # saved at another world size: loaded at setup_data
        self._train_loaders: list[object] = []  # held: the tracker's positions need them until the next fit
        self._train_layout: tuple[str, list[Any], list[int | None]] | None = None  # several train loaders
        self._train_batch: Any = None  # the combined batch in flight (several train loaders only)
        self._run_begun = False  # this call's run is counted (a call that runs no loop is counted at teardown)
        self._cut_by = ""  # an exception ended the last call: what, and in which call (settled at the next call)
        self._validation_restart = ""  # read from a fit checkpoint's loops: see _validation_at_load
        self._fit_scope: tuple[int, ...] | None = None  # where the train run scope of this Trainer's fit began
        self._warned = False
        self._warnings_back: Callable[[], None] | None = None  # see resume.quiet_not_resumable_warning
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
        self._train = StageDriver(progress.train, self._count_tokens)
        self._validate = StageDriver(progress.validate, self._count_tokens)
        self._test = StageDriver(progress.test, self._count_tokens)
        self._predict = StageDriver(progress.predict, self._count_tokens)

    @property
    def state_key(self) -> str:
        return STATE_KEY

    def _anomaly(self, message: str) -> None:
        """Record what the counts could not follow; warn the first time only."""
        self.tracker.progress.note_anomaly(message)
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"progress record: {message}; recorded in get_progress(trainer).anomalies (further anomalies "
                "are recorded there without a warning)",
                RuntimeWarning,
                stacklevel=3,
            )

    # pickling (torch.save(trainer), copy.deepcopy(trainer), ddp_spawn) ------------------------
    def __getstate__(self) -> dict[str, Any]:
        """Plain data: the progress state instead of the live record, no trainer reference or optimizer hooks."""
        state = dict(self.__dict__)
        for name in ("_train", "_validate", "_test", "_predict"):
            del state[name]
        state["tracker"] = self.tracker.progress.state_dict()
        state["_trainer"] = None
        state["_step_hooks"] = []
        state["_train_loaders"] = []
        state["_warnings_back"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        progress = state.pop("tracker")
        self.__dict__.update(state)
        self.tracker = Tracker()
        self.tracker.progress.load_state_dict(progress)
        self._drivers()

    # setup / teardown -------------------------------------------------------------------------
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._trainer = weakref.ref(trainer)
        self._run_begun = False
        # left by a resumed fit that trained nothing
        self._rng_check_at_start = self._rng_check_unmoved = self._rng_check_at_run = None
        self._rng_boundary = self._rng_await_build = False
        self._rng_built = self._rng_after_cut = None
        self._rng_iterator = _nothing
        if self._cut_by:
            self._settle_cut()
        attach(trainer, self.tracker.progress)
        if self._rank_files:
            wrap_checkpoint_io(trainer)  # each rank's entry in its own file beside the checkpoint (_checkpoint_io)
        if stage == _FIT:
            resume.hook_before_first_iter(trainer.fit_loop, self._track_train_loaders)
            resume.hook_after_setup_data(trainer.fit_loop, self._setup_data_returned)

    @_passenger
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._remove_step_hooks()
        resume.forget_epoch_run(trainer.fit_loop)  # a fit that ended before the epoch its RNG check waited for
        self._rng_after_cut = None
        self._warnings_as_before()
        kind = str(getattr(stage, "value", stage))  # Lightning passes its TrainerFn (a str enum)
        if kind != _FIT and not self._run_begun:  # Lightning skipped a loop over zero batches: still a run
            progress = self.tracker.progress
            progress.run_ready(kind)
            progress.run_started()
            progress.run_processed()
            progress.run_completed()
        self._run_begun = False

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        """Note the exception; what it cut is closed at the next call on this Trainer.

        Not now: a checkpoint written after the exception (``OnExceptionCheckpoint``) must hold the
        record as it was when the exception struck, as Lightning's loops do.
        """
        self._remove_step_hooks()
        self._warnings_as_before()
        self.tracker.progress.note_run_end("interrupted" if isinstance(exception, KeyboardInterrupt) else "crashed")
        self._cut_by = f"{type(exception).__name__} in {getattr(trainer.state.fn, 'value', trainer.state.fn)}"
        self._run_begun = False

    def _settle_cut(self) -> None:
        """A new call on a Trainer whose last call an exception ended: close what it cut.

        A fit's run stays open: Lightning's fit counters carry on at its next fit.
        """
        for driver in (self._train, self._validate, self._test, self._predict):
            driver.reset()
        cut_by, self._cut_by = self._cut_by, ""
        cut = abandon_in_flight(self.tracker.progress, reenter=cut_by.endswith(f" in {_FIT}"))
        if cut:
            self.tracker.progress.note_anomaly(f"{cut_by} cut: {cut}")

    def _remove_step_hooks(self) -> None:
        for handle in self._step_hooks:
            handle.remove()
        self._step_hooks = []

    # fit -------------------------------------------------------------------------------------
    @_passenger
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._loggers.forget()
        progress = self.tracker.progress
        bind_lifetime(pl_module, progress)  # a model that carries its lifetime (track_lifetime) continues it
        # Lightning restores its loop counters after this hook: a loaded entry says they will carry on
        loaded, self._reenter = self._reenter, False
        carry_on = loaded or resume.fit_counters_carry_on(trainer)
        reentered = carry_on and reenter_last_run(progress, _FIT)
        progress.run_ready(_FIT)
        if carry_on and not reentered:
            if self._fit_scope is not None and not loaded:  # validate/test/predict came in between
                continue_run_scope(progress.train, self._fit_scope)
            else:
                self._anomaly(
                    f"this fit continues Lightning's counters of an earlier fit (global_step {trainer.global_step}, "
                    f"epoch {trainer.current_epoch}) that the record did not count as its last run: run-scope "
                    "counts start at 0"
                )
        self._fit_scope = run_scope_bases(progress.train)  # re-entered: where the continued run's scope began
        progress.run_started()
        self._run_begun = True
        self._remove_step_hooks()
        self._step_hooks = count_optimizer_steps(progress.train, trainer.optimizers)

    def _track_train_loaders(self, loaders: list[object]) -> bool:
        """Lightning set up its train loaders and is about to iterate them (see ``hook_before_first_iter``);
        whether the restored epoch is over, so that Lightning's next iteration begins the next one afresh.

        After a load, that may be before Lightning restored its loops (``configure_optimizers`` reading
        ``trainer.estimated_stepping_batches``): what its restart will do is read from the checkpoint.
        """
        trainer = self._trainer() if self._trainer is not None else None
        loaded, self._loaded = self._loaded, False
        restart, self._restart = self._restart, None
        self._train_loaders = list(loaders)
        if trainer is not None:
            self._train_layout = resume.train_layout(trainer.fit_loop)
        untrained, self._resumed_untrained = self._resumed_untrained, False
        if trainer is not None and not loaded:
            # a fit continued after a resumed one that trained nothing
            self._close_restored_epoch(
                resume.closes_restored_epoch(trainer.fit_loop), resume.reached_max_steps(trainer)
            )
            # mid-epoch, its data resumes at the checkpoint's position, as fit(ckpt_path=...) would
            if untrained and self.tracker.view.is_mid_epoch and not self.tracker.resume_loaded_again():
                warnings.warn(
                    "this fit continues, mid-epoch, a fit resumed from a checkpoint that trained nothing (max_steps "
                    "reached): Lightning goes on with that epoch's batch counts, but the train data of this fit "
                    "starts a new pass instead of resuming the checkpoint's position; fit(ckpt_path=...) with the "
                    "larger max_steps resumes exactly",
                    InexactResumeWarning,
                    stacklevel=2,
                )
        for index, loader in enumerate(loaders):  # Lightning's loops restore a loader's own state
            self.tracker.track_train_loader(loader, index, framework_restores_state=True)
        if not loaded or trainer is None:
            return False
        if self._elastic_entry is not None:
            entry, self._elastic_entry = self._elastic_entry, None
            elastic.load(self.tracker, entry, loaders, trainer.fit_loop)
            self.tracker.progress.run_ready(_FIT)  # re-enter the restored run, as on_fit_start does after a load
            self.tracker.progress.run_started()
            self._rng_check = ResumeRngCheck(load=_SEED_BEFORE)
            self._rng_check.loaded()
        check, self._rng_check = self._rng_check, None
        if check is not None:  # Lightning is about to build the resumed run's train iterator
            check.check(
                "between the checkpoint load and Lightning's first train iterator (configure_optimizers, on_fit_start, "
                "train_dataloader())"
            )
        self._rng_at_setup = GlobalRng.capture()
        if restart is None:  # loaded without a checkpoint of Lightning's: its loops start afresh
            restart = resume.Restart(trainer.global_step, epoch_consumed=False, closes_epoch=False)
        finished = resume.reached_max_steps(trainer, restart.global_step)  # Lightning trains nothing
        self._resumed_untrained = finished
        if finished and self.tracker.view.train.epochs.lifetime.in_flight:
            self._warn_epoch_left_open(trainer)
        epoch_over = restart.epoch_consumed and self.tracker.view.train.epochs.lifetime.in_flight and not finished
        if epoch_over:  # Lightning's next iteration of these loaders is the next epoch, as in the uninterrupted run
            self.tracker.forget_loaded_positions()
        if restart.no_epoch_counted and not finished and self.tracker.view.train.epochs.lifetime.in_flight:
            self._warn_epoch_uncounted(restart.epoch_consumed)  # (after a finished fit no epoch is in flight)
        self._close_restored_epoch(restart.closes_epoch, finished)
        view = self.tracker.view
        if check is not None and check.armed:
            if view.is_mid_epoch and not restart.epoch_consumed:
                # nothing draws before the first batch that continues the epoch: compared again once the
                # start hooks are over (_arm_first_batch_check)
                self._rng_check_epoch = view.epoch_index
                self._rng_check_at_start = check
                self._rng_await_build = True
            elif not finished:
                self._rng_boundary = True  # Lightning's iterator of the next epoch drew: see _arm_first_batch_check
                self._rng_await_build = True  # Lightning builds it right after this returns
        if view.is_mid_epoch and not epoch_over:
            _warn_if_restored_ahead(loaders)
        if view.is_mid_epoch and all(isinstance(loader, DataLoader) for loader in loaders):
            batch = view.train.batches.epoch.completed
            self._warnings_back = resume.quiet_not_resumable_warning(trainer, batch, view.epoch_index)
        return epoch_over

    def _warn_epoch_left_open(self, trainer: pl.Trainer) -> None:
        """Resumed at ``max_steps`` inside an epoch: Lightning trains nothing and leaves that epoch open."""
        epoch = self.tracker.view.epoch_index
        warnings.warn(
            f"resumed at max_steps={trainer.max_steps} inside epoch {epoch} (0-based): Lightning trains nothing more "
            f"and leaves that epoch open (current_epoch stays {epoch}), where a run that is not interrupted closes "
            f"it when it reaches max_steps (current_epoch {epoch + 1}); the record follows Lightning. Resumed with a "
            "larger max_steps, the run continues exactly",
            InexactResumeWarning,
            stacklevel=3,
        )

    def _warn_epoch_uncounted(self, consumed: bool) -> None:
        """Resumed inside an epoch that Lightning's counters do not show (``_no_epoch_counted``): the checkpoint of a
        fit that was itself resumed at an epoch end."""
        epoch = self.tracker.view.epoch_index
        if consumed:
            self.tracker.progress.note_anomaly(f"Lightning runs train epoch {epoch} (0-based) again after a resume")
            what = (
                f"Lightning counts the epoch finished and runs the next one as epoch {epoch} again (one epoch more "
                "than an uninterrupted run)"
            )
        else:
            self.tracker.progress.note_anomaly(f"Lightning numbers train epoch {epoch}'s resumed batches from 0")
            what = (
                "Lightning numbers the epoch's remaining batches from batch_idx 0, so what depends on batch_idx "
                "(accumulate_grad_batches' optimizer steps among them) falls on other batches than in an "
                "uninterrupted run"
            )
        warnings.warn(
            f"the checkpoint was saved in epoch {epoch} (0-based) by a fit that was itself resumed at an epoch end, "
            f"whose Lightning loop counters show no epoch in flight: {what}; the record follows Lightning. A fit "
            "resumed mid-epoch saves correct counters again",
            InexactResumeWarning,
            stacklevel=3,
        )

    def _setup_data_returned(self) -> None:
        """Lightning's ``setup_data`` returned (``hook_after_setup_data``). After a load, the first time: the resumed
        run's train iterator is built (and, for a loader without a length, its first batch prefetched), no hook
        ran since. The next time (``_FitLoop.on_advance_start``): every ``on_train_start`` hook ran, no
        ``on_train_epoch_start`` hook yet (see ``_unmoved_check``)."""
        trainer = self._trainer() if self._trainer is not None else None
        if trainer is None:
            return
        if self._rng_check_unmoved is not None:
            self._unmoved_check(trainer)
        if not self._rng_await_build:
            return
        self._rng_await_build = False
        built = resume.train_iterator(trainer.fit_loop)
        self._rng_iterator = _nothing if built is None else weakref.ref(built)
        if self._rng_boundary:
            self._rng_built = GlobalRng.capture()
        check = self._rng_check_at_start
        if check is not None and check.moved_since(GlobalRng.capture()):
            self._rng_check_at_start = None  # the replay puts the RNGs back: only the prefetch drew since the load
            warnings.warn(
                "a train dataloader without a length drew from the global RNG in the main process when Lightning "
                "prefetched the first batch of the resumed epoch: the saved run had prefetched that batch before "
                "its checkpoint, with the draws in the checkpoint's RNG state, so the resumed run's data and random "
                "draws differ from the uninterrupted run. Keep main-process loading free of global-RNG draws (draw "
                "in worker processes, num_workers > 0)",
                InexactResumeWarning,
                stacklevel=2,
            )

    def _warnings_as_before(self) -> None:
        if self._warnings_back is not None:
            self._warnings_back()
            self._warnings_back = None

    def _close_restored_epoch(self, closes: bool, max_steps_reached: bool) -> None:
        """Where Lightning ``closes`` the restored epoch, it counts it as finished without its end hooks, and starts
        the next one without its start hooks: so do we. Not while ``max_steps`` is reached: Lightning trains nothing
        and leaves that epoch open, until a fit on the same Trainer with more steps closes it."""
        train = self.tracker.progress.train
        if closes and not max_steps_reached and train.view.epochs.lifetime.in_flight:
            train.epoch_processed()
            train.epoch_completed()
            self._train.epoch_to_open = True

    @_passenger
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # from the state Lightning restored before this hook (a restored last_epoch is no step)
        count_scheduler_steps(self.tracker.progress.train, [c.scheduler for c in trainer.lr_scheduler_configs])
        if self._rng_check_at_start is not None or self._rng_boundary:
            self._arm_first_batch_check(trainer)
        if self._gradients is not None:
            restore_gradients(pl_module.parameters(), self._gradients)
            self._gradients = None
        # beats from the run's start: a process killed before its first save is recorded
        keep_heartbeat(self.tracker.progress, self._heartbeat)

    @_passenger
    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._train.epoch_begin()
        if self._rng_at_setup is not None:
            rng, self._rng_at_setup = self._rng_at_setup, None
            if resume.discards_setup_iterator(trainer):
                # Lightning builds this epoch's iterator after the hooks, as in the uninterrupted run: undo the
                # draws of the one it built in setup_data
                self._rng_check_at_run = None
                rng.apply()

    def _unmoved_check(self, trainer: pl.Trainer) -> None:
        """Between the ``on_train_start`` and the ``on_train_epoch_start`` hooks of a fit resumed at an epoch
        boundary (see ``_arm_first_batch_check``): the generators the early iterator did not draw from must still
        be as at this callback's ``on_train_start`` (the uninterrupted run runs no ``on_train_start`` hook),
        unless Lightning undoes that iterator's draws at this epoch's start (and with them any in between)."""
        unmoved, self._rng_check_unmoved = self._rng_check_unmoved, None
        if unmoved is None or trainer.current_epoch != self._rng_check_epoch or resume.discards_setup_iterator(trainer):
            return
        others = tuple(name for name in GLOBAL_GENERATORS if name not in self._rng_check_generators)
        unmoved.check(_AT_TRAIN_START, generators=others)

    def _arm_first_batch_check(self, trainer: pl.Trainer) -> None:
        """The resumed fit's ``on_train_start``: set up the comparison of the global RNGs once its start hooks
        are over, when Lightning first runs a train epoch (``call_before_epoch_run``): after every
        ``on_train_start`` and ``on_train_epoch_start`` hook, before the loaders read (and, without workers, draw
        for) a batch, before a cut validation is finished, before the batch transfer hooks and
        ``on_train_batch_start`` (which may draw at every batch, in both runs).

        Mid-epoch they must still be as loaded (compared now too: callbacks before this one). At an epoch
        boundary Lightning built the next epoch's iterator (and, without a length, prefetched its first batch)
        before these hooks, the uninterrupted run after them: they must be as ``setup_data`` left them (compared
        now: callbacks before this one); then the generators it drew from must stay as they are now until the
        epoch runs; the others (a draw in ``on_train_epoch_start`` comes out as in the uninterrupted run) until
        the ``on_train_epoch_start`` hooks.
        """
        check, self._rng_check_at_start = self._rng_check_at_start, None
        boundary, self._rng_boundary = self._rng_boundary, False
        built, self._rng_built = self._rng_built, None
        compared = GLOBAL_GENERATORS
        if check is not None:
            if trainer.current_epoch != self._rng_check_epoch or check.check(_AT_TRAIN_START):
                return
            where = _AT_TRAIN_START
        elif boundary and self._rng_at_setup is not None:
            check = ResumeRngCheck(load=_SEED_BEFORE)
            if built is not None:  # nothing of the user's ran since the build but on_train_start hooks before this
                check.loaded(built)
                if check.check(_AT_TRAIN_START):
                    return
            check.loaded()
            compared = check.moved_since(self._rng_at_setup)  # those the iterator drew from
            where = _AT_EPOCH_BOUNDARY
            if compared != GLOBAL_GENERATORS:
                self._rng_check_unmoved = check
        else:
            return
        self._rng_check_epoch = trainer.current_epoch
        self._rng_check_where = where
        self._rng_check_generators = compared
        if compared:  # none: the iterator drew nothing, so the hooks draw where the uninterrupted run does
            self._rng_check_at_run = check
            resume.call_before_epoch_run(trainer.fit_loop, self._resumed_epoch_runs)

    def _resumed_epoch_runs(self) -> None:
        """Lightning first runs a train epoch in the resumed fit: the check set up at ``on_train_start``, if it is
        the epoch it was set up for (Lightning counts an epoch whose batches were all done as finished and starts
        the next one) and reads the iterator ``setup_data`` built (a new one drew first, as in the uninterrupted
        run)."""
        check, self._rng_check_at_run = self._rng_check_at_run, None
        trainer = self._trainer() if self._trainer is not None else None
        if check is None or trainer is None or trainer.current_epoch != self._rng_check_epoch:
            return
        if resume.train_iterator(trainer.fit_loop) is self._rng_iterator():
            check.check(self._rng_check_where, last=True, generators=self._rng_check_generators)

    # The per-batch hooks guard inline (a try costs nothing in Python 3.11; a wrapper costs a call)
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        try:
            self._train.batch_begin(batch)
        except EventOrderError as error:
            self._anomaly(f"on_train_batch_start: {error}")
        if self._train_layout is not None:
            self._train_batch = batch
        self._rng_at_setup = None  # Lightning iterates the setup_data iterator: its draws stand

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
            if self._train_layout is not None:
                self._combined_batch_end(batch)
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

    def _combined_batch_end(self, batch: Any) -> None:
        """One step read a batch of each train loader (``CombinedLoader``): each loader counts its own.

        In mode ``max_size_cycle`` a shorter loader starts over when its pass ends and the epoch goes
        on; Lightning prefetches the next batch, so it has started over before this step ends: its
        epoch-scope counts (the position a checkpoint saves) restart now.
        """
        if self._train.batch_to_complete:
            return  # a checkpoint caught this batch up already
        assert self._train_layout is not None
        mode, keys, passes = self._train_layout
        parts = []
        for index, key in enumerate(keys):
            try:
                part = batch[key]
            except (KeyError, IndexError, TypeError):
                part = None
            if part is not None:  # mode max_size: an exhausted loader gives None
                parts.append((index, part))
        if not parts:
            self._train.batch_end(used=batch)
            return
        first, part = parts[0]
        self._train.batch_end(first, part)
        train = self.tracker.progress.train
        for index, part in parts[1:]:
            count_dataloader_batch(train, index, samples_in(part))
        trainer = self._trainer() if self._trainer is not None else None
        if mode != "max_size_cycle" or trainer is None:
            return
        if train.view.batches.epoch.processed >= trainer.num_training_batches:
            return  # the epoch ends here: nothing starts over
        counts = train.view.dataloaders
        for index, batches in enumerate(passes):
            if batches is not None and index < len(counts) and counts[index].batches.epoch >= batches:
                begin_dataloader_pass(train, index)

    @_passenger
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._train.epoch_end()

    @_passenger
    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._train.settle()
        self.tracker.progress.run_processed()

    @_passenger
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._remove_step_hooks()
        self._train.settle()
        progress = self.tracker.progress
        runs = progress.view.run.counts
        if runs.processed != runs.started:  # a fit that trained nothing: no on_train_start/end
            progress.run_processed()
            if self._rng_at_setup is not None:  # resumed: nothing read the iterator Lightning built in setup_data
                rng, self._rng_at_setup = self._rng_at_setup, None
                rng.apply()  # undo its draws: a fit continued on this Trainer builds it again, as a resume would
        if trainer.should_stop:  # told to stop (EarlyStopping, the module) before max_epochs / max_steps
            progress.note_run_end("stopped_early")
        progress.run_completed()

    # validate / test / predict -------------------------------------------------------------
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

    @_passenger
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._evaluation_start(trainer, "validate")

    @_passenger
    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._validate.epoch_begin()

    @_passenger
    def on_validation_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        if not trainer.sanity_checking:
            self._validate.batch_begin(batch)

    @_passenger
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

    @_passenger
    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._validate.epoch_end()

    @_passenger
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._evaluation_end(trainer, self._validate)
            if self._rng_after_cut is not None:
                self._cut_validation_ended()

    @_passenger
    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._evaluation_start(trainer, "test")

    @_passenger
    def on_test_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._test.epoch_begin()

    @_passenger
    def on_test_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._test.batch_begin(batch)

    @_passenger
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

    @_passenger
    def on_test_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._test.epoch_end()

    @_passenger
    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._evaluation_end(trainer, self._test)

    @_passenger
    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._evaluation_start(trainer, "predict")

    @_passenger
    def on_predict_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._predict.epoch_begin()

    @_passenger
    def on_predict_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self._predict.batch_begin(batch)

    @_passenger
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

    @_passenger
    def on_predict_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._predict.epoch_end()

    @_passenger
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
        if trainer is not None and trainer.state.fn == _FIT:
            try:
                self._catch_up(trainer)
            except EventOrderError as error:
                self._anomaly(f"checkpoint: {error}")
            if self.tracker.view.validate.epochs.lifetime.in_flight:
                warnings.warn(_SAVED_IN_VALIDATION, InexactResumeWarning, stacklevel=2)
        return self.tracker.checkpoint_state_dict()

    def _catch_up(self, trainer: pl.Trainer) -> None:
        """A checkpoint taken in an end hook that ran before ours: mark what Lightning already marked."""
        train = self.tracker.progress.train
        batches, epochs_mine = train.view.batches.lifetime, train.view.epochs.lifetime
        if resume.on_train_batch_end(trainer) and batches.ready != batches.processed:
            if self._train_layout is not None:
                self._combined_batch_end(self._train_batch)
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
        gradients = capture_gradients(pl_module.parameters()) if self.tracker.view.is_mid_accumulation else None
        if trainer.world_size > 1:
            gradients = _every_rank(gradients)
        if gradients is not None:
            checkpoint[GRADIENTS_KEY] = gradients
        train = self.tracker.view.train
        epochs, done = train.epochs.lifetime, train.batches.epoch.processed
        ended = epochs.ready == epochs.completed > 0 and done > 0  # after the fit: its last epoch is closed
        if ended and (resume.reached_max_steps(trainer) or done < trainer.num_training_batches):
            warnings.warn(
                f"checkpoint saved after a fit that ended (max_steps, or a stop) at batch {done} of epoch "
                f"{epochs.completed - 1} (0-based): resuming from it, Lightning counts that epoch as finished and "
                f"goes on at batch {done} of epoch {epochs.completed}, so the resumed run's epochs and train data "
                "differ from the run that saved it from there",
                InexactResumeWarning,
                stacklevel=2,
            )
        if self.tracker.view.is_mid_epoch and self._train_layout is not None:
            self._warn_cycled_loaders()
        if self.tracker.view.is_mid_epoch and resume.fetches_in_step(trainer):
            warnings.warn(
                "mid-epoch checkpoint of a training_step(dataloader_iter): the batch_idx that Lightning's iterator "
                "yields restarts at 0 when it resumes (and with accumulate_grad_batches > 1 Lightning zeroes and "
                "steps gradients by that count), so a step that uses it runs differently from an uninterrupted run",
                InexactResumeWarning,
                stacklevel=2,
            )
        if resume.on_train_batch_end(trainer) and resume.validation_due(trainer):
            warnings.warn(
                "checkpoint saved in on_train_batch_end before a due validation: Lightning skips that "
                "validation when resuming from it, so the resumed run will not validate there (its "
                "validation counts and any randomness the validation draws differ from an uninterrupted run)",
                InexactResumeWarning,
                stacklevel=2,
            )

    def _warn_cycled_loaders(self) -> None:
        """``CombinedLoader(mode="max_size_cycle")`` restarts a shorter loader within the epoch, where its
        pass ends: unknown for a loader without a length."""
        assert self._train_layout is not None
        mode, _, passes = self._train_layout
        if mode != "max_size_cycle":
            return
        read = self.tracker.view.train.batches.epoch.processed  # each step reads a batch of every loader
        for index, batches in enumerate(passes):
            if batches is not None and read >= batches:
                warnings.warn(
                    f"train dataloader {index} of a CombinedLoader(mode='max_size_cycle') was read to its end in "
                    "this epoch and started over: the position of every loader resumes exactly, but Lightning's "
                    "resumed iterator forgets which loaders had ended and draws from the global RNG where the "
                    "uninterrupted run did not, so later random draws differ",
                    InexactResumeWarning,
                    stacklevel=3,
                )
            elif batches is None:
                warnings.warn(
                    f"train dataloader {index} of a CombinedLoader(mode='max_size_cycle') has no length, so where "
                    "it starts over within the epoch is unknown: this mid-epoch checkpoint may not resume its "
                    "position exactly",
                    InexactResumeWarning,
                    stacklevel=3,
                )

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self._refuse_unread_rank_files(checkpoint.get("callbacks", {}).get(STATE_KEY))
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
            read_heartbeat(self.tracker.progress, self._heartbeat)  # the lost work of the run that saved it
            self._gradients = _own_gradients(checkpoint.get(GRADIENTS_KEY), trainer.global_rank)
            self._validation_restart = "finish" if resume.restarts_mid_validation(checkpoint) else "skip"
            self._loggers.rewind(trainer, checkpoint)  # the loggers continue at the checkpoint's step

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Load the entry (``ProgressStateError`` on damage, before anything runs) and re-arm the hooks.

        ``validate``/``test``/``predict(ckpt_path=...)`` train nothing: only the progress is loaded
        (this rank's part), neither RNGs nor data positions, and only into a record that has counted no
        run yet (on a Trainer that already ran, the record goes on counting its runs). An entry saved at another world size is
        mapped onto the train loaders, so a fit loads it when Lightning has set them up, still before
        any batch runs (``_elastic``).
        """
        self._refuse_unread_rank_files(state_dict)
        trainer = self._trainer() if self._trainer is not None else None
        self._elastic_entry = None
        self._cut_by = ""  # the loaded record replaces what an exception cut
        if trainer is not None and trainer.state.fn != _FIT:
            if self.tracker.view.run.counts.ready == 0:  # a record of its own goes on: it counts this Trainer's runs
                _load_progress_only(self.tracker, state_dict, trainer.global_rank)
        elif trainer is None or not saved_elsewhere(state_dict):
            self.tracker.load_state_dict(state_dict)
            self._rng_check = ResumeRngCheck(load=_SEED_BEFORE)
            self._rng_check.loaded()
            if self._validation_at_load(state_dict["progress"]) and trainer is not None:
                self._cut_validation_reread()
        else:
            self._elastic_entry = state_dict
        for driver in (self._train, self._validate, self._test, self._predict):
            driver.reset()
        self._loaded = self._reenter = trainer is None or trainer.state.fn == _FIT

    def _refuse_unread_rank_files(self, entry: object) -> None:
        """An entry whose ranks' entries are in rank files (an index in place of the list) is read through
        ``rank_files=True`` only: without it, refused before anything is loaded."""
        ranks = entry.get("ranks") if isinstance(entry, Mapping) else None
        if not self._rank_files and isinstance(ranks, Mapping):
            raise ProgressStateError(
                "ranks",
                f"the checkpoint keeps each rank's entry in rank files beside it ({ranks.get('rank_files')!r}): "
                "resume it with ProgressTracker(rank_files=True), as the run that saved it",
            )

    def _validation_at_load(self, progress: dict[str, Any]) -> bool:
        """A fit checkpoint saved inside a validation: follow what Lightning does with that validation.

        Saved inside a validation batch (e.g. ``OnExceptionCheckpoint``), Lightning finishes the
        validation on resume, counting on from the batches done: so does the record. Saved after a
        validation batch, Lightning counts the validation as finished without running the rest: the
        record keeps the batches that ran, closes the validation, and says so.
        """
        restart, self._validation_restart = self._validation_restart, ""
        if not restart or not reenter_evaluation_epoch(self.tracker.progress, "validate", progress):
            return False
        if restart == "finish":
            return True  # Lightning finishes it: see _cut_validation_reread
        validate = self.tracker.progress.validate
        validate.epoch_processed()
        validate.epoch_completed()
        done = self.tracker.view.validate.batches.epoch.completed
        message = (
            f"checkpoint saved during a validation after {done} of its batches: Lightning resumes training "
            "without running the rest of that validation (it counts it as finished); the record counts the "
            f"{done} batches that ran"
        )
        self.tracker.progress.note_anomaly(message)
        warnings.warn(message, InexactResumeWarning, stacklevel=2)
        return False

    def _cut_validation_reread(self) -> None:
        """Loaded inside a validation batch: Lightning finishes that validation on resume, counting on from the
        batches done but re-reading its data from the first batch of its first loader (the record counts as it
        does). The RNGs loaded now are put back when that validation ends (``_cut_validation_ended``)."""
        self._rng_after_cut = GlobalRng.capture()
        message = (
            "resumed inside a validation batch: Lightning finishes that validation re-reading its data from the "
            "first batch of its first loader, so its batches and metrics differ from the uninterrupted run's; the "
            "training after it continues exactly only if that validation made no global random draw after the "
            "checkpoint in the uninterrupted run (its last loader's iterator was already built)"
        )
        self.tracker.progress.note_anomaly(message)
        warnings.warn(message, InexactResumeWarning, stacklevel=2)

    def _cut_validation_ended(self) -> None:
        """The validation a checkpoint cut ended: the RNGs go back to those loaded, as the uninterrupted run had them
        at the cut (re-building and re-reading its loaders drew from them again)."""
        rng, self._rng_after_cut = self._rng_after_cut, None
        if rng is not None:
            rng.apply()
            if self._rng_at_setup is not None:  # Lightning may still drop its setup_data iterator: back to these
                self._rng_at_setup = rng


_SAVED_IN_VALIDATION = (
    "checkpoint saved inside a validation: a fit resumed from it does not go on with that validation where it "
    "stopped (Lightning re-reads it from its first batch when saved inside a batch, or counts it finished when "
    "saved between batches), so that validation's batches and metrics differ from the uninterrupted run's "
    "(docs/lightning.md, Limits)"
)


def _load_progress_only(tracker: Tracker, entry: object, rank: int) -> None:
    """Load rank ``rank``'s progress of ``entry`` (saved rank ``rank % W`` at another world size ``W``)."""
    prefix = ""
    if isinstance(entry, Mapping) and isinstance(entry.get("ranks"), (list, RankFiles)) and entry["ranks"]:
        source = rank % len(entry["ranks"])
        prefix, entry = f"ranks.{source}.", entry["ranks"][source]
    if not isinstance(entry, Mapping) or "progress" not in entry:
        raise ProgressStateError(f"{prefix}progress", "missing: the entry has no progress")
    try:
        tracker.progress.load_state_dict(entry["progress"])
    except ProgressStateError as error:
        key = f"{prefix}progress.{error.key}" if error.key else f"{prefix}progress"
        raise ProgressStateError(key, error.problem) from None


def _every_rank(gradients: list[torch.Tensor | None] | None) -> Any:
    """On rank 0, the writer: ``{"ranks": [rank 0's gradients, ...]}``; elsewhere this rank's own (collective).

    DDP's ``no_sync`` leaves each rank its own partial sums. Every rank calls it at a fit
    checkpoint, with None outside an accumulation window: one 8-byte ``all_reduce`` then, and
    a ``gather`` to the writer only when some rank is inside one (``gather_to_writer``).
    """
    mine = None if gradients is None else [None if g is None else g.cpu() for g in gradients]
    ranks = gather_to_writer(mine)
    return mine if ranks is None else {"ranks": ranks}


def _own_gradients(saved: object, rank: int) -> Any:
    """This rank's saved partial gradients (rank ``rank % saved ranks`` at another world size, as its RNGs)."""
    if not isinstance(saved, dict):
        return saved  # saved by one process (or absent)
    ranks = saved.get("ranks")
    if not isinstance(ranks, (list, RankTensors)) or not ranks:  # RankTensors: each rank's in its own file
        raise ProgressStateError("gradients.ranks", "expected a non-empty list of each rank's gradients")
    return ranks[rank % len(ranks)]


def _nothing() -> None:
    """What a weak reference to no object returns."""


def _warn_if_restored_ahead(loaders: list[object]) -> None:
    """Lightning prefetches a batch of a train loader without a length and saves a loader's own state after it
    (its ``state_dict`` / ``load_state_dict``, which Lightning restores): the resumed epoch skips that batch."""
    for index, loader in enumerate(loaders):
        if callable(getattr(loader, "load_state_dict", None)) and not _has_length(loader):
            warnings.warn(
                f"train dataloader {index} has a state of its own, which Lightning restores, and no length: "
                "Lightning saved that state after the batch it had prefetched, so the resumed epoch skips it "
                "(give the loader's dataset a __len__, and Lightning does not prefetch)",
                InexactResumeWarning,
                stacklevel=4,
            )


def _has_length(loader: object) -> bool:
    try:
        len(loader)  # type: ignore[arg-type]
    except TypeError:
        return False
    return True
