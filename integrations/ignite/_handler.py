"""The ``ProgressHandler``: records a trainer and its evaluators and resumes them exactly (docs/ignite.md)."""

from __future__ import annotations

import os
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import torch
from ignite.engine import DeterministicEngine, Engine, Events
from torch.utils.data import DataLoader
from torch.utils.hooks import RemovableHandle

from tracker_core import (
    InexactResumeWarning,
    ProgressStateError,
    ProgressView,
    Stage,
    Tracker,
    TrainStageProgress,
    count_optimizer_steps,
)
from tracker_core.adapter import (
    ResumeRngCheck,
    abandon_in_flight,
    batches_in,
    bind_lifetime,
    capture_gradients,
    keep_heartbeat,
    read_heartbeat,
    reenter_last_run,
    restore_gradients,
    samples_in,
    saved_elsewhere,
    with_rank_files,
)
from tracker_core.adapter import register_progress as register
from tracker_core.checkpoints import IGNITE_STATE_KEYS as _STATE_KEYS
from tracker_core.integrations.ignite._compat import set_batches_into_epoch
from tracker_core.integrations.ignite._deterministic import deterministic_entry, inexact_resume, load_progress
from tracker_core.integrations.ignite._elastic import check_loader_given, check_run_loader, epoch_consumed, map_engine
from tracker_core.integrations.ignite._events import CountTokens, add_handlers, attach_stage, close_cut, settle_for_save
from tracker_core.integrations.ignite._loaders import (
    Loaders,
    any_own_state,
    finish_replay,
    has_own_state,
    has_plain_loader,
    loaders_in,
)
from tracker_core.integrations.ignite._steps import count_trainer_steps

_BEFORE_FIRST_BATCH = "in a STARTED or EPOCH_STARTED handler of the resumed run"
_BUILT_AFTER_LOAD = (
    "the global RNG state changed between Checkpoint.load_objects and the trainer's run() by exactly the draws "
    "that building its StatefulDataLoader after the load makes (a shuffling one draws its sampler's seed when "
    "constructed); other draws there, such as iterating a DataLoader, look the same. The data order is "
    "restored all the same, but the resumed run's dropout, augmentation and other random draws now differ from the "
    "uninterrupted run. Build the train loader before Checkpoint.load_objects and draw nothing between it and run()"
)


class ProgressHandler:
    """The progress of one training program across its Ignite engines (docs/ignite.md): attach it to the trainer and
    each evaluator or inference engine, and put it in a ``Checkpoint``'s ``to_save``; ``Checkpoint.load_objects`` then
    makes the trainer's next ``run()`` continue exactly. ``count_tokens(batch)``: a batch's tokens, all or ``(tokens,
    non_padding_tokens)`` (default: from ``input_ids`` and ``attention_mask``). ``heartbeat``: a file where rank 0
    keeps how far the run got since its last checkpoint, to measure a resume's lost work (None: no heartbeat)."""

    def __init__(
        self, count_tokens: CountTokens | None = None, heartbeat: str | os.PathLike[str] | None = None
    ) -> None:
        self._tracker = Tracker()
        self._count_tokens = count_tokens
        self._parameters: list[torch.nn.Parameter] = []
        self._several_optimizers = False
        self._trainer: weakref.ref[Engine] | None = None  # weak: an engine the user drops is freed at once
        self._stages: weakref.WeakKeyDictionary[Engine, str] = weakref.WeakKeyDictionary()  # each engine's stage
        self._dataloader: DataLoader[Any] | None = None  # the trainer's, if given to attach()
        self._restored: dict[str, Any] | None = None  # loaded progress, until the trainer's next STARTED
        self._loaded_for_evaluation = False  # saved at another world size, loaded with no trainer attached
        self._loaders = Loaders(self._tracker)
        self._rng_check = ResumeRngCheck(load="Checkpoint.load_objects")
        self._checkpoint_path: str | None = None  # loading_from: the file Checkpoint.load_objects loads next
        self._heartbeat = None if heartbeat is None else os.fspath(heartbeat)
        self._deterministic = False  # the trainer is a DeterministicEngine (_deterministic.py)
        self._deterministic_problem = ""  # why its own mid-epoch resume of its data is inexact, from STARTED
        self._schedulers_at_epoch_start: list[str] = []  # param schedulers a mid-epoch resume calls again
        self._warned_inexact = False  # the DeterministicEngine's warning, once

    @property
    def view(self) -> ProgressView:
        """The read-only progress (also ``tracker_core.get_progress(engine)`` for any attached engine)."""
        return self._tracker.view

    def attach(
        self,
        engine: Engine,
        stage: str = "train",
        optimizers: Sequence[torch.optim.Optimizer] = (),
        scaler: torch.amp.GradScaler | None = None,
        dataloader: DataLoader[Any] | None = None,
        schedulers: Sequence[object] = (),
        model: torch.nn.Module | None = None,
    ) -> None:
        """Record ``engine`` as stage ``stage``; attach before adding your own handlers to it (docs/ignite.md). Train
        only: ``optimizers`` whose steps are counted; an AMP ``scaler`` whose skipped steps are counted (default:
        ``engine.state.scaler``); the ``dataloader`` its ``run()`` will get, onto which a checkpoint saved at another
        world size is mapped; ``schedulers``: Ignite param-scheduler handlers attached to its events by now, and torch
        LR schedulers the step function steps. ``model`` (any stage): a model carrying its lifetime
        (``tracker_core.track_lifetime``), continued by each ``run()``."""
        if stage not in tuple(Stage):
            raise ValueError(f"unknown stage {stage!r}; expected one of {', '.join(Stage)}")
        if engine in self._stages:
            raise ValueError(f"this engine is already attached to this ProgressHandler, as {self._stages[engine]!r}")
        bind = None if model is None else partial(bind_lifetime, model, self._tracker.progress)  # at each STARTED
        if stage == "train":
            self._attach_trainer(engine, optimizers, scaler, dataloader, schedulers, bind)
        elif optimizers or schedulers or scaler is not None or dataloader is not None:
            raise ValueError("optimizers, schedulers, a scaler and a dataloader belong to the train engine only")
        else:
            attach_stage(engine, self._tracker.progress, stage, self._count_tokens, bind)
        self._stages[engine] = stage
        register(engine, self._tracker.progress)

    def _attach_trainer(
        self,
        engine: Engine,
        optimizers: Sequence[torch.optim.Optimizer],
        scaler: torch.amp.GradScaler | None,
        dataloader: DataLoader[Any] | None,
        schedulers: Sequence[object],
        bind: Callable[[], object] | None,
    ) -> None:
        """Record ``engine`` as the trainer: its DataLoader, its optimizers' steps and parameters, its events."""
        if self._trainer is not None:
            raise ValueError("a trainer is already attached to this ProgressHandler")
        if isinstance(engine, DeterministicEngine) and dataloader is not None:
            raise ValueError(
                "a DeterministicEngine positions its data itself, by its own iteration count: it resumes "
                "at the saved world size only, so there is no DataLoader to map (leave out dataloader=)"
            )
        if self._loaded_for_evaluation:
            raise ValueError(
                "a checkpoint saved at another world size was loaded for evaluation (no trainer was attached): "
                "attach the trainer (with dataloader=) before Checkpoint.load_objects to resume training"
            )
        self._trainer = weakref.ref(engine)
        self._deterministic = isinstance(engine, DeterministicEngine)
        if dataloader is not None:
            self._tracker.track_train_loader(dataloader)
            self._dataloader = dataloader
        progress = self._tracker.progress
        count_steps_from_now = _count_steps_while_running(engine, progress.train, optimizers)
        self._several_optimizers = len(optimizers) > 1
        scaler = scaler if scaler is not None else getattr(engine.state, "scaler", None)
        count_steps, self._schedulers_at_epoch_start = count_trainer_steps(
            engine, progress.train, optimizers, scaler, schedulers
        )
        # Each parameter the optimizers step, once, in the order of their groups.
        found = {id(p): p for optimizer in optimizers for group in optimizer.param_groups for p in group["params"]}
        self._parameters = list(found.values())

        def started(trainer: Engine) -> None:
            if bind is not None:
                bind()
            if self._restored is not None:
                read_heartbeat(progress, self._heartbeat)  # the lost work of the run saved
            if self._deterministic:  # the run's data as given (the engine replaces its DataLoader at the first epoch)
                self._deterministic_problem = inexact_resume(trainer.state.dataloader)
            self._start_run(trainer)
            keep_heartbeat(progress, self._heartbeat)
            count_steps()
            count_steps_from_now()

        add_handlers(
            engine,
            progress.train,
            progress=progress,
            count_tokens=self._count_tokens,
            loaders=None if self._deterministic else self._loaders,  # a DeterministicEngine positions its data itself
            started=started,
        )

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (or deep-copied) without its engines: the progress, loaded back as from a checkpoint."""
        return {"progress": self._tracker.progress.state_dict()}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]
        self._tracker.progress.load_state_dict(state["progress"])

    def state_dict(self) -> dict[str, Any]:
        """Plain progress entry plus the partial gradients the next optimizer step would use."""
        progress = self._tracker.progress
        trainer = None if self._trainer is None else self._trainer()
        epoch_ended = False  # Ignite read the epoch's data to its end (the core may not know its length)
        if trainer is not None:  # a Checkpoint added before attach runs ahead of the handler's own
            epoch_ended = settle_for_save(trainer, progress.train, self._loaders)
            self._warn_if_inexact(trainer)
        # Gradients the next step adds to: in an accumulation window, or any left with several optimizers.
        pending = self.view.is_mid_accumulation or (
            self._several_optimizers and any(p.grad is not None and bool(p.grad.any()) for p in self._parameters)
        )
        gradients = capture_gradients(self._parameters) if pending else []
        # With several processes every rank's entry (a collective, which Checkpoint calls on every rank).
        if self._deterministic:
            entry = deterministic_entry(progress)
        else:
            entry = self._tracker.checkpoint_state_dict(epoch_ended=epoch_ended)
        keep_heartbeat(progress, self._heartbeat)
        return {"progress_tracker": entry, "gradients": gradients}

    def loading_from(self, checkpoint_path: str | os.PathLike[str]) -> None:
        """Name the checkpoint file the next ``Checkpoint.load_objects`` loads (Ignite does not tell the handler):
        needed only for a ``RankFilesSaver``'s checkpoint moved away from where it was written."""
        self._checkpoint_path = os.fspath(checkpoint_path)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Validate everything (``ProgressStateError`` naming the key, nothing changed), then load."""
        if not isinstance(state, Mapping):
            raise ProgressStateError("", f"expected a mapping, got {type(state).__name__}")
        for key in _STATE_KEYS:
            if key not in state:
                raise ProgressStateError(key, "missing")
        path, self._checkpoint_path = self._checkpoint_path, None
        entry = with_rank_files(state["progress_tracker"], path)
        if self._trainer is None and saved_elsewhere(entry):  # evaluators only: nothing trains, nothing to map
            self._tracker.load_for_evaluation(entry)
            self._loaded_for_evaluation = True
            return
        if self._deterministic:  # the progress only: the engine positions its data and sets its RNGs itself
            load = partial(load_progress, self._tracker.progress, entry)
        else:
            check_loader_given(entry, self._dataloader)
            load = partial(self._tracker.load_state_dict, entry)
        # The saved partial gradients are put back and the entry loaded, or neither (load raising).
        gradients = state["gradients"]
        if not isinstance(gradients, list | tuple):
            raise ProgressStateError("gradients", f"expected a list, got {type(gradients).__name__}")
        if not gradients and _inside_a_window(entry):
            raise ProgressStateError(
                "gradients", "none saved, but the progress was saved inside an accumulation window, which holds them"
            )
        if not gradients:
            load()
        elif not self._parameters:
            raise ProgressStateError(
                "gradients", "partial gradients were saved: attach the trainer with its optimizers before loading"
            )
        else:
            restore_gradients(self._parameters, gradients, then=load)
        self._restored = self._tracker.progress.state_dict()  # this rank's part of a gathered entry
        if not self._deterministic:
            self._rng_check.loaded()

    def _start_run(self, engine: Engine) -> None:
        """Begin, continue or re-enter the fit run, following Ignite's state (docs/ignite.md, ``engine.state``)."""
        restored, self._restored = self._restored, None
        track = not self._deterministic  # a DeterministicEngine positions its data itself
        if restored is None:
            if track:
                self._loaders.track(engine.state.dataloader)
            self._continue_or_begin(engine)
            return
        progress = self._tracker.progress
        view = progress.view
        mapped = view.resume_mapping is not None  # saved at another world size
        check_run_loader(engine, self._dataloader)
        completed = view.train.batches.run.completed
        began_anew = engine.state.iteration == 0 if mapped else engine.state.iteration < completed
        if began_anew and completed:  # Ignite found the loaded state finished and began anew: so does the record
            progress.load_lifetime(restored)
            self._tracker.forget_loaded_positions()
            if track:
                self._loaders.track(engine.state.dataloader)
            self._rng_check.forget()  # a new run: nothing to compare
            progress.run_ready("fit")
            progress.run_started()
            return
        if track:
            # only a train loader built after the load moved the RNGs (a StatefulDataLoader(shuffle=True) draws a seed)
            if self._rng_check.drew_only(sum(map(has_own_state, loaders_in(engine.state.dataloader)))):
                self._rng_check.forget()
                warnings.warn(_BUILT_AFTER_LOAD, InexactResumeWarning, stacklevel=2)
            else:
                self._rng_check.check("between Checkpoint.load_objects and the trainer's run()")
            if not view.train.is_mid_epoch:
                _warn_if_loaded_elsewhere(engine.state.dataloader)
            self._loaders.track(engine.state.dataloader)
        if not view.run.counts.in_flight:  # saved at COMPLETED (after terminate(), or max_epochs raised now)
            reenter_last_run(progress, "fit")
        progress.run_ready("fit")
        progress.run_started()
        if mapped:
            map_engine(engine, view)
        # A plain DataLoader is positioned by nothing: its resumed epoch's fresh iterator starts a new order (warned
        # at the load), drawing the global RNG before the first batch, as a resume at an epoch boundary does.
        plain = track and has_plain_loader(engine.state.dataloader)
        continues = _align_engine(engine, view, replayed=track) and track
        if continues and self._loaders.round_robin is not None:
            self._loaders.round_robin.resume_at(view.train.batches.epoch.completed)
        if continues:  # a resumed build the tracker did not make (a DistributedSampler's) takes nothing from the RNGs
            # Ignite builds it after EPOCH_STARTED, whose handlers so far (the user's, a reseed) run before this one.
            _once(engine, Events.EPOCH_STARTED, self._tracker.train_iterators_building)
            _once(engine, Events.GET_BATCH_STARTED, self._tracker.train_iterators_built)
        if continues and not plain and self._rng_check.armed:  # the RNGs compared again before the first fetch
            _once(engine, Events.GET_BATCH_STARTED, partial(self._rng_check.check, _BEFORE_FIRST_BATCH, last=True))
        else:  # a resume at an epoch boundary draws legitimately before its first batch (the next epoch's sampler)
            self._rng_check.forget()

    def _continue_or_begin(self, engine: Engine) -> None:
        progress = self._tracker.progress
        view = progress.view
        # A run still in flight was cut by an exception (Ignite's state.batch is still the cut batch);
        # an epoch still in flight in an ended run was cut by terminate(). Ignite goes on with a new epoch.
        cut = close_cut(progress.train, samples_in(engine.state.batch)) if view.run.counts.in_flight else ""
        if view.train.epochs.lifetime.in_flight:
            close_cut(progress.train, 0)
        if cut:
            progress.note_anomaly(f"{cut} (by an exception; Ignite's next run() goes on)", framework="Ignite")
        if engine.state.iteration == 0:
            if view.run.counts.in_flight:
                abandon_in_flight(progress, reenter=False)
        elif not reenter_last_run(progress, "fit"):
            last = f"after a {view.run.kind} run" if view.run.kind else "of a run the record did not count"
            progress.note_anomaly(
                f"Ignite continued its state at iteration {engine.state.iteration} {last}: this fit run's counts "
                "start at 0",
                framework="Ignite",
            )
        progress.run_ready("fit")
        progress.run_started()

    def _warn_if_inexact(self, trainer: Engine) -> None:
        """Warn when a checkpoint cannot resume at the same data position: mid-epoch, or between epochs that end inside
        the loader's pass (a DeterministicEngine: once)."""
        if self._deterministic and self._warned_inexact:
            return
        mid_epoch, state = self.view.is_mid_epoch, trainer.state
        loader = state.dataloader
        length = batches_in(loader) if isinstance(loader, DataLoader) else None
        # inside an epoch a loader with its own state resumes inside its pass; at an epoch's end it is saved as ended
        if (
            length
            and state.epoch_length != length
            and ((mid_epoch and not has_own_state(loader)) or (not mid_epoch and state.iteration % length))
        ):
            problem = (
                f"the trainer's epoch_length ({state.epoch_length}) differs from the length of its "
                f"DataLoader ({length}): Ignite then carries one loader iterator across epochs, and a "
                "checkpoint inside the loader's pass cannot resume at the same data position"
            )
        elif trainer.should_terminate_single_epoch and trainer.last_event_name == Events.EPOCH_COMPLETED:
            problem = (
                "a checkpoint at the EPOCH_COMPLETED of an epoch ended by terminate_epoch(): Ignite built the next "
                "epoch's iterator at TERMINATE_SINGLE_EPOCH, drawing its order, and a resume draws it again; save at "
                "TERMINATE_SINGLE_EPOCH with terminate_epoch(skip_epoch_completed=True), or inside the next epoch"
            )
        elif not mid_epoch:
            return
        elif id(loader) != self._loaders.tracked_id and not self._deterministic:
            problem = (
                "a checkpoint in an epoch whose data set_data() replaced: the position saved is not one of the new "
                "data, and a resume reads it from another batch; call set_data() at EPOCH_STARTED"
            )
        elif trainer.should_terminate_single_epoch:
            problem = (
                "a checkpoint after terminate_epoch() in this epoch: the resume reads the rest of the epoch, which the "
                "run that stopped it skips; save at TERMINATE_SINGLE_EPOCH, or inside the next epoch"
            )
        elif self._deterministic_problem:  # set for a DeterministicEngine only
            problem = self._deterministic_problem
        elif not self._deterministic and _fetched_unstepped(trainer, self.view) and any_own_state(loader):
            event = getattr(trainer.last_event_name, "name", trainer.last_event_name)
            problem = (
                f"a checkpoint at {event} (iteration {trainer.state.iteration}), after the "
                "batch was fetched and before its step ended: a StatefulDataLoader's state is saved after that "
                "batch, so the resumed run does not train it; checkpoint at ITERATION_COMPLETED"
            )
        elif self._schedulers_at_epoch_start and state.epoch_length and state.iteration % state.epoch_length:
            problem = (
                f"a mid-epoch checkpoint with the param scheduler(s) {', '.join(self._schedulers_at_epoch_start)} on "
                "EPOCH_STARTED: Ignite fires EPOCH_STARTED again when it resumes inside the epoch, so they step once "
                "more than in the uninterrupted run (as any EPOCH_STARTED handler runs again)"
            )
        else:
            return
        self._warned_inexact = True
        warnings.warn(problem, InexactResumeWarning, stacklevel=3)


def _fetched_unstepped(trainer: Engine, view: ProgressView) -> bool:
    """The trainer's current batch was fetched and its step has not completed (GET_BATCH_COMPLETED, ITERATION_STARTED,
    inside the step, or an exception of it)."""
    event = trainer.last_event_name
    if event == Events.GET_BATCH_COMPLETED:
        return True
    return event != Events.ITERATION_COMPLETED and view.train.batches.lifetime.in_flight


def _align_engine(engine: Engine, view: ProgressView, replayed: bool) -> bool:
    """Make Ignite's epoch and in-epoch position agree with the loaded progress, firing the EPOCH_COMPLETED Ignite
    skips after a checkpoint at an epoch's last batch. True when the first batch continues the saved epoch."""
    consumed = epoch_consumed(view)
    length = engine.state.epoch_length
    if consumed and length is not None and consumed >= length:  # checkpointed at the epoch's last batch
        if replayed:
            finish_replay(engine.state.dataloader, length)
        engine.state.epoch = view.train.epochs.run.ready
        engine.fire_event(Events.EPOCH_COMPLETED)
        consumed = 0  # the next epoch starts at its first batch
    engine.state.epoch = view.train.epochs.run.completed
    length = engine.state.epoch_length
    if length is None or engine.state.iteration % length != consumed:  # Ignite's own derivation says otherwise
        set_batches_into_epoch(engine, consumed)
    return consumed > 0


def _once(engine: Engine, event: Events, call: Callable[[], object]) -> None:
    """Call ``call`` at the next ``event`` only (the resumed epoch's EPOCH_STARTED or its first GET_BATCH_STARTED)."""

    def once(engine: Engine) -> None:  # the engine as Ignite's argument: none held here
        engine.remove_event_handler(once, event)
        call()

    engine.add_event_handler(event, once)


def _inside_a_window(entry: object) -> bool:
    """Whether the saved progress ``entry`` was saved inside an accumulation window (False where it does not read
    so: the load refuses a malformed entry)."""
    try:
        return bool(entry["progress"]["stages"]["train"]["accumulating_batches"])  # type: ignore[index]
    except (KeyError, TypeError, IndexError):
        return False


def _warn_if_loaded_elsewhere(data: object) -> None:
    """Warn if a loader resumed between epochs had a state of its own loaded besides the handler's entry."""
    for index, loader in enumerate(loaders_in(data)):
        if getattr(loader, "next_iter_state", None):  # a StatefulDataLoader's loaded state, waiting for its iter()
            warnings.warn(
                f"train dataloader {index} had a state of its own loaded besides the ProgressHandler's entry (is it "
                "in Checkpoint's to_save?): saved between epochs, torchdata resumes it drawing the global RNG "
                "otherwise than the uninterrupted run's next epoch (other dropout, augmentation). Leave the loader out "
                "of to_save: the handler's entry holds its state",
                InexactResumeWarning,
                stacklevel=3,
            )


def _count_steps_while_running(
    engine: Engine, train: TrainStageProgress, optimizers: Sequence[torch.optim.Optimizer]
) -> Callable[[], None]:
    """Count the ``optimizers``' steps from the call it returns (at STARTED) to the end of ``engine``'s run: another
    trainer may step a shared optimizer."""
    hooks: list[RemovableHandle] = []

    def count(running: bool = True) -> None:
        for hook in hooks:
            hook.remove()
        hooks[:] = count_optimizer_steps(train, optimizers) if running else []

    for end in (Events.COMPLETED, Events.TERMINATE):
        engine.add_event_handler(end, count, running=False)
    return count
