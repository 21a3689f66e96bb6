"""Hugging Face Accelerate adapter: one object that counts progress and makes ``save_state`` resume exactly.

Accelerate has no callbacks, so the loops themselves report::

    progress = AcceleratorProgress(accelerator)  # after accelerator.prepare(...)
    with progress.fit(3) as fit:
        for epoch in fit.epochs():
            for index, batch in fit.train(train_loader, with_index=True):
                with accelerator.accumulate(model):
                    ...  # forward, backward, optimizer.step(), zero_grad()
                if want_checkpoint:
                    accelerator.save_state(path)  # exact mid-epoch resume from here
            for batch in progress.evaluate(val_loader):
                ...

``tracker_core.get_progress(accelerator)`` returns the read-only view. See docs/accelerate.md.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Callable, Generator, Iterable, Iterator
from typing import Any, Literal, TextIO, TypeVar, overload

import torch
from accelerate.data_loader import SkipBatchSampler, SkipDataLoader

from tracker_core import (
    EventOrderError,
    InexactResumeWarning,
    ProgressStateError,
    ProgressView,
    StageProgress,
    Tracker,
    count_optimizer_steps,
)
from tracker_core.adapter import (
    Display,
    GlobalRng,
    ResumeRngCheck,
    TokenCounter,
    batches_in,
    bind_lifetime,
    capture_gradients,
    count_scheduler_steps,
    count_skipped_steps,
    keep_heartbeat,
    read_heartbeat,
    restore_gradients,
    samples_in,
)
from tracker_core.adapter import accelerate_checkpoint as checkpoint
from tracker_core.adapter import register_progress as attach
from tracker_core.integrations.accelerate import _commit as commit
from tracker_core.integrations.accelerate import _elastic as elastic
from tracker_core.integrations.accelerate._compat import (
    create_seedable_generator,
    drop_iterator,
    prepared_models,
    prepared_optimizers,
    prepared_schedulers,
    registered_objects,
)
from tracker_core.integrations.accelerate._fit import Fit
from tracker_core.integrations.accelerate._loggers import rewind_trackers
from tracker_core.integrations.accelerate._loops import Evaluation, TrainBatch

__all__ = ["AcceleratorProgress"]

Batch = TypeVar("Batch")
_REGISTERED_STATE = {"saved_by": "AcceleratorProgress", "file": "progress_tracker_{rank}.pt"}


class AcceleratorProgress:
    """Progress of an ``accelerate.Accelerator``'s loops, saved and loaded by its ``save_state``/``load_state``.

    Create it after ``accelerator.prepare(...)``; run the fit in :meth:`fit` and iterate through
    its ``epochs()`` and ``train()``, and :meth:`evaluate`, :meth:`test` and :meth:`predict`. Optimizer steps
    are counted on the prepared optimizers' real steps (Accelerate's ``step()`` is a
    no-op outside a ``sync_gradients`` window). ``save_state`` writes ``progress_tracker_{rank}.pt`` beside
    Accelerate's files; ``load_state`` validates it before Accelerate loads anything (``ProgressStateError``,
    nothing loaded). Registered for checkpointing, after your other registered objects
    (``accelerator.register_for_checkpointing(progress)``), it also commits each save: rank 0's file is written
    last and lists the folder's files, and ``load_state`` refuses a folder that differs from that list.

    The loops never raise because of the order they are used in: leaving one (``break``, an
    exception) ends its pass, leaving the ``with`` block ends the fit run, and what the record cannot follow is noted in
    ``view.anomalies`` with one warning. It pickles (with the Accelerator holding it).

    Each stage counts the tokens of its batches: ``count_tokens(batch)`` (all tokens, or
    ``(tokens, non_padding_tokens)``) when given, else a batch's ``input_ids`` and ``attention_mask``.

    ``heartbeat``: the path of a file where the main process keeps the fit's heartbeat (from the start of
    :meth:`fit`, at optimizer steps and at each ``save_state``), read by ``load_state``: the resumed run's
    ledger then says what the crashed run lost after that checkpoint. None (the default): no file; that loss
    is ``unknown``.
    """

    def __init__(
        self,
        accelerator: Any,
        count_tokens: Callable[[Any], int | tuple[int, int]] | None = None,
        heartbeat: str | os.PathLike[str] | None = None,
    ) -> None:
        self._accelerator = accelerator
        self._heartbeat = None if heartbeat is None else os.fspath(heartbeat)
        self._tracker = Tracker()
        self._progress = self._tracker.progress
        self._train = self._progress.train
        self._tokens = {
            name: TokenCounter(self._progress.stage(name), count_tokens)
            for name in ("train", "validate", "test", "predict")
        }
        self._hooked_optimizers = 0
        self._check_skips: Callable[[], None] = _no_scaler  # the GradScaler's skip check, once per train batch
        self._fit: Fit | None = None  # the open fit run, None outside one
        self._fit_at = (0, 0)  # the epoch the open fit last began, and its max_epochs
        self._in_flight: TrainBatch | None = None  # the train batch handed to a loop body
        self._evaluation: Evaluation | None = None  # the open evaluation pass
        self._warned = False  # an anomaly warned already
        self._loaders: dict[int, Any] = {}  # train dataloader index -> the prepared loader
        self._pass_start: dict[int, int] = {}  # index -> loader.iteration when its last train pass began
        self._restored_iterations: dict[int, int] = {}  # index -> loader.iteration to set before the next pass
        self._finished_passes: set[int] = set()  # restored mid-epoch after the pass yielded its last batch
        self._begun_passes: set[int] = set()  # train loaders whose pass began in the current epoch
        self._left_passes: set[int] = set()  # those whose pass the loop left before its end
        self._resumed_passes: dict[int, int] = {}  # index -> batches its pass in the epoch load_state resumes skips
        self._restored_step: int | None = None  # accelerator.step after an elastic load, set when the pass begins
        # The global RNGs when the open evaluation epoch began: one saved mid-way restarts from
        # its first batch after a resume, drawing from these as the uninterrupted run did.
        self._restored_evaluation_rng: tuple[str, GlobalRng] | None = None
        # The global RNGs load_state restored, compared when the fit begins and, if the saved epoch
        # is resumed, when its first train pass begins (_check_rng_at_pass)
        self._rng_check = ResumeRngCheck(load="accelerator.load_state")
        self._check_rng_at_pass = False
        self._display: Display | None = None  # set by display(); None: the loops show nothing
        self._next_save_iteration: int | None = None  # after a load_state
        # a registered progress's save_state under way: its folder and this process's progress, for state_dict()
        self._pending: tuple[str, checkpoint.SavedProgress] | None = None
        attach(accelerator, self._progress)
        accelerator.register_save_state_pre_hook(self._on_save)
        accelerator.register_load_state_pre_hook(self._on_load)
        self._hook_optimizers()

    @property
    def view(self) -> ProgressView:
        """The read-only progress, as ``tracker_core.get_progress(accelerator)`` returns it."""
        return self._progress.view

    @property
    def next_save_iteration(self) -> int | None:
        """After ``load_state``: the number automatic checkpoint naming's next ``checkpoint_N`` should take (after
        the loaded one and any newer folder), None before a load. Accelerate's ``load_state`` leaves
        ``project_configuration.iteration`` as it was; set it yourself so the next ``save_state()`` does not fail
        on an existing folder: ``accelerator.project_configuration.iteration = progress.next_save_iteration``."""
        return self._next_save_iteration

    def display(self, stream: TextIO | None = None, terminal: bool | None = None, interval: float = 10.0) -> None:
        """Show the loops' stage, epoch, batch, steps, samples/s and ETA (main process only).

        On a terminal a live line (with rich); elsewhere a line every ``interval`` seconds
        and at each epoch end, to ``stream`` (standard output by default). See docs/display.md.
        """
        if self._accelerator.is_main_process:
            self._display = Display(self.view, stream=stream, terminal=terminal, interval=interval)

    # register_for_checkpointing and pickling -----------------------------------------------
    def state_dict(self) -> dict[str, str]:
        """What ``accelerator.register_for_checkpointing(progress)`` stores: only a note saying where the
        progress is. ``save_state`` calls it after writing Accelerate's own files (and the objects registered
        before this one), and it commits that save: each process writes its ``progress_tracker_{rank}.pt``, and
        rank 0 its own last, once the other processes' files of this save are in the folder (it waits for them
        ``PATIENCE_S`` at most, never in a barrier), listing the size and CRC-32 of every other file then
        in the folder. A rank whose file did not come is left out of the commit, with a warning: ``load_state``
        refuses the folder (``save_state`` called on the main process only cannot be resumed)."""
        if self._pending is not None:
            (directory, saved), self._pending = self._pending, None
            missing = commit.commit(directory, saved)
            if missing:
                warnings.warn(
                    f"accelerator.save_state({directory!r}): the progress file of rank(s) {missing} did not come "
                    f"within {commit.PATIENCE_S:g} s (save_state called on the main process only, or those processes "
                    "failed), so the commit leaves them out and load_state refuses this folder",
                    RuntimeWarning,
                    stacklevel=4,
                )
        return dict(_REGISTERED_STATE)

    def load_state_dict(self, state: object) -> None:
        """Accept :meth:`state_dict`'s note (``load_state`` already loaded the progress file); loads nothing."""
        if state != _REGISTERED_STATE:
            raise ProgressStateError("", f"expected AcceleratorProgress.state_dict()'s note, got {state!r}")

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the display (it holds a stream); optimizers pickle without torch's step hooks."""
        state = self.__dict__.copy()
        state.update(_display=None, _hooked_optimizers=0, _pending=None, _check_skips=_no_scaler)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Register with the unpickled Accelerator; optimizers are hooked again when the next loop begins."""
        self.__dict__.update(state)
        attach(self._accelerator, self._progress)

    # fit -----------------------------------------------------------------------------------
    def fit(self, max_epochs: int) -> Fit:
        """A fit run of ``max_epochs`` train epochs, a context manager (:class:`Fit`)::

            with progress.fit(3) as fit:
                for epoch in fit.epochs():
                    for batch in fit.train(train_loader):
                        ...

        Leaving the ``with`` block ends the run: completed, ``stopped_early``, ``interrupted``
        (``KeyboardInterrupt``) or ``crashed`` (any other exception) in the run ledger.
        """
        self._hook_optimizers()
        if self._display is not None:
            self._display.set_max_epochs(max_epochs)
        return Fit(self, max_epochs)

    def _begin_fit(self, fit: Fit) -> None:
        if self._fit is not None:  # a fit still open (entered and never left): it ends as stopped early
            self._end_fit(self._left_early())
        self._end_evaluation_left_open()
        self._bind_lifetimes()
        self._progress.run_ready("fit")
        self._progress.run_started()
        self._fit = fit
        keep_heartbeat(self._progress, self._heartbeat)  # a process killed before its first save is recorded
        if self._rng_check.armed:
            self._rng_check.check("between accelerator.load_state and the fit")
            if not self._check_rng_at_pass:  # the next epoch begins: what it draws, the uninterrupted run drew
                self._rng_check.forget()

    def _begin_train_epoch(self, epoch: int, max_epochs: int) -> None:
        self._train.epoch_ready()
        self._train.epoch_started()
        self._begun_passes.clear()
        self._left_passes.clear()
        self._fit_at = (epoch, max_epochs)

    def _leave_fit(self, fit: Fit, ended: str | None) -> None:
        """The ``with`` block of ``fit`` is left: by an exception (``ended``), else before its last epoch or not."""
        if self._fit is not fit:  # completed, or a load_state or another fit took over
            return
        batch = self._in_flight
        if ended is not None and batch is not None:  # the exception left the train pass in its body
            self._left_passes.add(batch.loader)
            self._end_left_batch(batch)
        self._end_fit(ended or self._left_early())

    def _left_early(self) -> str | None:
        """How the open fit run ends when its block is left without an exception: ``stopped_early`` before its
        last epoch or in the middle of a train pass, else completed (None)."""
        epoch, max_epochs = self._fit_at
        return "stopped_early" if epoch + 1 < max_epochs or self._left_passes else None

    def _bind_lifetimes(self) -> None:
        """A run begins: prepared models that carry their lifetime (``track_lifetime``) continue it and carry this record."""
        for model in prepared_models(self._accelerator):
            bind_lifetime(model, self._progress)

    def _end_train_epoch(self) -> None:
        self._end_train_batch()
        if self._resumed_passes or self._finished_passes:  # passes of the resumed epoch that never began
            self._tracker.forget_loaded_positions()  # begin the next epoch's passes from their start
        self._resumed_passes.clear()
        self._finished_passes.clear()
        train = self._train
        epochs = self.view.train.epochs.lifetime
        if epochs.started != epochs.processed:
            train.epoch_processed()
            train.epoch_completed()

    def _end_fit(self, ended: str | None = None) -> None:
        """End the fit run: completed, or ``ended`` (``crashed``, ``interrupted``, ``stopped_early``) in the run ledger."""
        self._end_evaluation_left_open()
        self._end_train_epoch()
        self._fit = None
        if not self.view.run.counts.in_flight:  # a refused load put back the record from before the fit
            return
        if ended is not None:
            self._progress.note_run_end(ended)
        self._progress.run_processed()
        self._progress.run_completed()

    # train passes --------------------------------------------------------------------------
    @overload
    def train(
        self, loader: Iterable[Batch], index: int = 0, *, with_index: Literal[False] = False
    ) -> Iterator[Batch]: ...

    @overload
    def train(
        self, loader: Iterable[Batch], index: int = 0, *, with_index: Literal[True]
    ) -> Iterator[tuple[int, Batch]]: ...

    def train(self, loader: Iterable[Batch], index: int = 0, *, with_index: bool = False) -> Iterator[Any]:
        """One train epoch's pass over the prepared ``loader`` (train dataloader number ``index``).

        With ``with_index=True`` it yields ``(batch_index, batch)``: the 0-based index of the
        batch among this loader's batches of the epoch, counting those trained before a resume
        (``enumerate`` would restart at 0). A batch is ready and started when fetched,
        processed and completed when the loop body hands control back or another pass fetches
        (passes over several loaders may alternate). A ``save_state`` inside the body counts
        the current batch as processed: save after the batch's step, as Accelerate's examples do.
        In the epoch ``load_state`` resumed, the pass already skips the batches trained before the
        checkpoint: a loader made by ``accelerator.skip_first_batches`` is refused there (``ValueError``,
        before a batch is fetched).
        """
        batches = self._train_pass(loader, index, with_index)
        if self._display is None:
            return batches
        return self._display.iterate(batches, "train", batches_in(loader))

    def _begin_pass(self, loader: Iterable[Any], index: int) -> bool:
        """Begin the train pass of dataloader ``index``; False when nothing is left of it (restored after its end)."""
        resumed = self._resumed_passes.get(index)
        if resumed is not None:
            _refuse_a_second_skip(loader, index, resumed)
            del self._resumed_passes[index]
        if self._rng_check.armed:
            self._first_pass_after_load()
        self._hook_optimizers()
        self._track(loader, index)
        if self._restored_step is not None:  # after Accelerate's load_state restored the old geometry's
            self._accelerator.step, self._restored_step = self._restored_step, None
        pass_start = getattr(loader, "iteration", None)
        if pass_start is not None:
            self._pass_start[index] = pass_start
        self._begun_passes.add(index)
        if index in self._finished_passes:
            self._spend_finished_pass(loader, index, pass_start)
            return False
        return True

    def _train_pass(self, loader: Iterable[Batch], index: int, with_index: bool) -> Generator[Any, None, None]:
        if not self._begin_pass(loader, index):
            return
        mine = TrainBatch(index)  # this pass's batch in a loop body, reused batch after batch
        train, view, accelerator, tokens = self._train, self._progress.view, self._accelerator, self._tokens["train"]
        counts = view.train.dataloaders
        batch_index = counts[index].batches.epoch if index < len(counts) else 0
        outside = False
        over = False  # the loop body handed the batch back: its step is over (counts only while mine is in flight)
        turn = train.batch_turner(index)  # ends the batch in flight and begins the next (ValueError: index < 0)
        try:
            for batch in loader:
                try:
                    if self._in_flight is mine and not mine.processed:  # every batch but the first (over is True)
                        done = mine.batch
                        if type(done) is not tokens.tokenless_type:  # most batches: no call
                            tokens(done)
                        self._check_skips()
                        turn(done)  # ends the batch before and begins this one: one call
                    else:
                        if self._in_flight is not None:  # the batch before, of another pass or processed by a save
                            self._end_train_batch()
                        train.batch_begin()
                        turn = train.batch_turner(index)  # anew: a load (which makes new counts) leads here
                        mine.processed = False
                        self._in_flight = mine
                except EventOrderError as error:
                    self._in_flight = mine.batch = None
                    if not outside:  # noted once per pass; its batches outside an epoch are not counted
                        outside = True
                        self._note(f"train dataloader {index} yielded batches outside an epoch of a fit ({error})")
                else:
                    mine.step = accelerator.step
                    mine.batch = batch
                over = False
                if with_index:
                    yield batch_index, batch
                    batch_index += 1
                else:
                    yield batch
                over = True
        except GeneratorExit:  # the loop body left (break, exception)
            self._end_left_batch(mine)
            self._left_passes.add(index)
            raise
        finally:  # the pass ended, or its loader raised: the last batch's step is over
            if self._in_flight is mine and over:
                self._end_train_batch()

    def _first_pass_after_load(self) -> None:
        """The first train pass after ``load_state``: if it resumes the saved epoch, nothing may have drawn
        since the load (the uninterrupted run went on with the next batch); a new epoch draws first."""
        if self._check_rng_at_pass:
            where = "between accelerator.load_state and the first train pass of the resumed epoch"
            self._rng_check.check(f"{where} (e.g. in the epoch loop's body before it)", last=True)
        self._rng_check.forget()

    def _spend_finished_pass(self, loader: Iterable[Any], index: int, pass_start: int | None) -> None:
        """Nothing is left of a pass restored after its last batch. Accelerate's loaders fail on an empty
        pass (an iterable one raises), so only the inner loader runs, to spend its armed position."""
        self._finished_passes.discard(index)
        inner = getattr(loader, "base_dataloader", loader)
        extra = 0
        if _start_from_the_beginning(loader):  # Accelerate restored its own state at the pass's end
            iter(inner)  # spends the armed position: built under the checkpoint's RNGs, nothing read
        else:
            extra = sum(1 for _ in inner)
        if extra:
            self._note(f"train dataloader {index}, saved at the end of its pass, yielded {extra} more batches")
        if pass_start is not None:
            loader.iteration = pass_start + 1  # type: ignore[attr-defined]

    def _end_left_batch(self, mine: TrainBatch) -> None:
        """End a pass's batch when its loop body left: trained if Accelerate's ``accumulate`` saw it or an
        optimizer stepped (as after a ``break`` at the end of the body), else undone (its data not consumed)."""
        if self._in_flight is not mine:
            return
        if mine.processed or mine.step != self._accelerator.step or self._train.stepped_in_batch:
            self._end_train_batch()
        else:
            self._in_flight = None
            self._train.cancel_batch()

    def _end_train_batch(self) -> None:
        """End the train batch in flight, if any."""
        batch = self._in_flight
        if batch is None:
            return
        self._in_flight = None
        self._check_skips()
        if batch.processed:  # a save_state in the loop body processed it
            self._train.batch_completed()
        else:
            self._train.batch_end_of(batch.batch, batch.loader)
            self._tokens["train"](batch.batch)
        batch.batch = None

    # evaluation passes ---------------------------------------------------------------------
    def evaluate(self, loader: Iterable[Batch], index: int = 0) -> Iterator[Batch]:
        """One validation epoch; inside :meth:`fit` it belongs to the fit run, else it is a validate run."""
        return self._evaluation_loop(self._progress.validate, "validate", loader, index)

    def test(self, loader: Iterable[Batch], index: int = 0) -> Iterator[Batch]:
        """One test epoch (a test run of its own outside :meth:`fit`)."""
        return self._evaluation_loop(self._progress.test, "test", loader, index)

    def predict(self, loader: Iterable[Batch], index: int = 0) -> Iterator[Batch]:
        """One predict epoch (a predict run of its own outside :meth:`fit`)."""
        return self._evaluation_loop(self._progress.predict, "predict", loader, index)

    def _evaluation_loop(self, stage: StageProgress, kind: str, loader: Iterable[Batch], index: int) -> Iterator[Batch]:
        batches = self._evaluation_pass(stage, kind, loader, index)
        if self._display is None:
            return batches
        return self._display.iterate(batches, stage.name, batches_in(loader))

    def _evaluation_pass(
        self, stage: StageProgress, kind: str, loader: Iterable[Batch], index: int
    ) -> Generator[Batch, None, None]:
        """One evaluation epoch. It touches no RNG: the run draws what it would draw without the
        adapter. Its RNGs at the start are kept, so that one saved mid-way (an unfinished
        evaluation restarts from its first batch after a resume) draws again what it drew."""
        self._end_evaluation_left_open()
        self._rng_check.forget()  # an evaluation before any train pass after a load: its draws are not compared
        progress = self._progress
        restored, self._restored_evaluation_rng = self._restored_evaluation_rng, None
        if restored is not None and restored[0] == stage.name:
            restored[1].apply()  # after load_state, whose own RNG file holds the save instant's RNGs
        own_run = self._fit is None
        if own_run:
            self._bind_lifetimes()
            progress.run_ready(kind)
            progress.run_started()
        first_pass = self.view.stage(stage.name).epochs.lifetime.completed == 0
        if _start_from_the_beginning(loader) and (restored is not None or first_pass):
            warnings.warn(
                f"{stage.name} dataloader {index} is a StatefulDataLoader that Accelerate's load_state restored "
                "before this pass, which begins from its first batch: a new iterator draws the global RNG and "
                "its sampler continues from its restored state, where the saving run used the iterator that "
                "prepare() built (first pass) or the state when the interrupted evaluation began",
                InexactResumeWarning,
                stacklevel=3,
            )
        evaluation = Evaluation(stage, index, own_run, GlobalRng.capture())
        self._evaluation = evaluation
        stage.epoch_ready()
        stage.epoch_started()
        try:
            for batch in loader:
                if self._evaluation is evaluation:
                    stage.batch_begin()
                    evaluation.samples = samples_in(batch)
                    evaluation.batch = batch
                yield batch
                if self._evaluation is evaluation:
                    stage.batch_end(evaluation.samples, index)
                    self._tokens[stage.name](batch)
                    evaluation.samples = -1
                    evaluation.batch = None
        except GeneratorExit:  # the loop body left: the epoch was cut short
            if self._evaluation is evaluation:
                self._end_evaluation(evaluation)
            raise
        if self._evaluation is evaluation:
            self._end_evaluation(evaluation)

    def _end_evaluation_left_open(self) -> None:
        """End an evaluation pass left while kept suspended (a frame held by an exception's traceback
        keeps it open), as a break would, when another loop begins or the fit run ends."""
        if self._evaluation is not None:
            self._end_evaluation(self._evaluation)

    def _end_evaluation(self, evaluation: Evaluation) -> None:
        self._evaluation = None
        stage = evaluation.stage
        if evaluation.samples >= 0:
            stage.batch_end(evaluation.samples, evaluation.loader)
            self._tokens[stage.name](evaluation.batch)
            evaluation.batch = None
        stage.epoch_processed()
        stage.epoch_completed()
        if evaluation.own_run:
            self._progress.run_processed()
            self._progress.run_completed()

    def track_train_loader(self, loader: object, index: int = 0) -> None:
        """Make the prepared train ``loader`` (train dataloader number ``index``) resumable mid-epoch.

        :meth:`train` does this itself; call it before ``load_state`` so that a saved loader
        position that does not fit this loader is refused there, before anything is loaded.
        """
        self._track(loader, index)

    # wiring ------------------------------------------------------------------------------
    def _track(self, loader: object, index: int) -> None:
        """Position the prepared loader's inner torch DataLoader (a DataLoaderShard only poses as one)."""
        self._loaders[index] = loader
        restored = self._restored_iterations.pop(index, None)
        if restored is not None and hasattr(loader, "iteration"):
            loader.iteration = restored
        inner = getattr(loader, "base_dataloader", loader)
        create_seedable_generator(inner)
        # use_stateful_dataloader: Accelerate's save_state / load_state keep its StatefulDataLoader's own state
        restores = bool(getattr(loader, "use_stateful_dataloader", False))
        self._tracker.track_train_loader(inner, index, framework_restores_state=restores)

    def _hook_optimizers(self) -> None:
        """Count real steps of prepared optimizers not hooked yet, on the torch optimizer inside each, and from
        now on (after a load_state restored them) the steps the GradScaler skips and every prepared scheduler's."""
        inner = [getattr(prepared, "optimizer", prepared) for prepared in prepared_optimizers(self._accelerator)]
        train, scaler = self._train, self._accelerator.scaler
        count_optimizer_steps(train, inner[self._hooked_optimizers :], first_index=self._hooked_optimizers)
        self._hooked_optimizers = len(inner)
        self._check_skips = _no_scaler if scaler is None else count_skipped_steps(train, scaler, inner)
        count_scheduler_steps(train, [getattr(s, "scheduler", s) for s in prepared_schedulers(self._accelerator)])

    def _note(self, message: str) -> None:
        """Record in the progress what the loops could not follow; warn the first time."""
        self._progress.note_anomaly(message)
        if not self._warned:
            self._warned = True
            warnings.warn(
                f"AcceleratorProgress: {message}. Noted in view.anomalies (later ones are noted without a warning)",
                RuntimeWarning,
                stacklevel=4,
            )

    def _parameters(self, models: list[torch.nn.Module]) -> list[torch.nn.Parameter]:
        return [p for model in models for p in model.parameters()]

    # checkpoints ---------------------------------------------------------------------------
    def _on_save(self, models: list[torch.nn.Module], weights: list[Any], output_dir: str) -> None:
        batch = self._in_flight
        if batch is not None and not batch.processed:  # saved from the loop body: the batch's step is done
            self._check_skips()
            self._train.batch_processed_of(batch.batch, batch.loader)
            self._tokens["train"](batch.batch)
            batch.processed = True
        accelerator = self._accelerator
        iterations: list[checkpoint.LoaderIteration | None] = []
        for index in range(max(self._loaders, default=-1) + 1):
            loader = self._loaders.get(index)
            now = getattr(loader, "iteration", None)
            begun = index in self._begun_passes  # else its flags and pass start are the last epoch's
            finished = begun and bool(getattr(loader, "end_of_dataloader", False))
            pass_start = self._pass_start.get(index) if begun else None
            iterations.append(None if now is None else checkpoint.LoaderIteration(now, pass_start, finished))
        left = sorted(self._left_passes) if self.view.train.epochs.lifetime.in_flight else []
        if left:
            warnings.warn(
                f"save_state after the loop left the pass of train dataloader(s) {', '.join(map(str, left))} "
                "before its end in this epoch: the resumed epoch is re-entered and that pass yields its "
                "remaining batches (save after the epoch, or before leaving the pass)",
                InexactResumeWarning,
                stacklevel=3,
            )
        evaluation = self._evaluation
        saved = checkpoint.SavedProgress(
            world_size=accelerator.num_processes,
            tracker=self._tracker.state_dict(),
            gradients=capture_gradients(self._parameters(models)),
            save_iteration=accelerator.project_configuration.iteration,
            loader_iterations=iterations,
            evaluation_rng=None if evaluation is None else (evaluation.stage.name, evaluation.rng),
            rank=accelerator.process_index,
        )
        if any(obj is self for obj in registered_objects(accelerator)):
            self._pending = (output_dir, saved)  # written by state_dict(), once Accelerate's files are
        else:
            self._pending = None
            checkpoint.write(output_dir, saved.rank, saved)
        keep_heartbeat(self._progress, self._heartbeat)

    def _on_load(self, models: list[torch.nn.Module], input_dir: str) -> None:
        """Validate and load before Accelerate loads anything, so a bad file leaves all unchanged.

        A committed folder (a registered progress saved it) must be what rank 0's progress file lists: every file
        there unchanged (``accelerate_checkpoint.commit_problem``); a save cut short or a folder mixing two saves is
        refused here. Without a commit, this process's file and rank 0's must come from the same save.

        Saved by another number of processes, every saved rank's file is read and the core maps
        the data position by global samples (``tracker_core/distributed/_elastic.py``); this process takes the
        rest (gradients, loader epochs, RNGs) from saved rank ``process_index % saved world size``.
        A loop still open when loading counts nothing more: the loaded run continues in the next loop.
        """
        accelerator = self._accelerator
        found = checkpoint.read_checkpoint(input_dir, accelerator.process_index, accelerator.num_processes)
        saved = found.own
        entry: dict[str, Any] = saved.tracker
        if found.ranks is not None:
            elastic.check_supported(accelerator, len(found.ranks))
            entry = {**found.ranks[0].tracker, "ranks": [rank.tracker for rank in found.ranks]}
        parameters = self._parameters(models)
        previous = capture_gradients(parameters)
        restore_gradients(parameters, saved.gradients)
        try:
            self._tracker.load_state_dict(entry)
        except BaseException:
            restore_gradients(parameters, previous)
            raise
        read_heartbeat(self._progress, self._heartbeat)  # the lost work of the run that saved it
        self._in_flight, self._fit, self._evaluation = None, None, None
        self._next_save_iteration = _next_save_iteration(accelerator, saved.save_iteration)
        resuming_epoch = self.view.train.epochs.lifetime.in_flight
        if found.ranks is None:  # Accelerate restores the same RNGs after this hook (saved at one instant)
            self._rng_check.loaded()
            self._check_rng_at_pass = resuming_epoch
        else:  # another world size: this rank's RNGs come from another saved rank than Accelerate's file
            self._rng_check.forget()
        self._restored_evaluation_rng = saved.evaluation_rng
        self._restored_iterations = {}
        self._finished_passes = set()
        mapped = elastic.MappedPasses.of(self.view.resume_mapping, self._loaders)
        self._restored_step = mapped.step if resuming_epoch else None
        for index, iteration in enumerate(saved.loader_iterations):
            if iteration is not None and resuming_epoch and mapped.finished.get(index, iteration.finished):
                self._finished_passes.add(index)
            if iteration is not None:
                use_pass = resuming_epoch and iteration.pass_start is not None
                self._restored_iterations[index] = iteration.pass_start if use_pass else iteration.now  # type: ignore[assignment]
        dataloaders = self.view.train.dataloaders
        self._resumed_passes = {
            i: d.batches.epoch for i, d in enumerate(dataloaders) if resuming_epoch and d.batches.epoch
        }
        if resuming_epoch:
            _warn_if_passes_alternate(saved.loader_iterations, self._finished_passes)
        rewind_trackers(accelerator, self.view.global_step)  # init_trackers' trackers continue at this step


def _no_scaler() -> None:
    """The skip check without a GradScaler: AMP skips no step."""


def _warn_if_passes_alternate(iterations: list[checkpoint.LoaderIteration | None], finished: set[int]) -> None:
    """Accelerate's ``step`` and its gradient sync at the end of a loader follow the most recently begun of the
    loaders whose pass is still open, and the resumed passes begin in the order the loop asks for them: with a
    pass open at the save and another open or still to begin, that order can differ from the saving run's."""
    open_passes = [
        i for i, it in enumerate(iterations) if it is not None and it.pass_start is not None and it.now == it.pass_start
    ]
    to_begin = [i for i, it in enumerate(iterations) if it is not None and it.pass_start is None and i not in finished]
    if open_passes and len(open_passes) + len(to_begin) > 1:
        names = ", ".join(str(i) for i in sorted(open_passes + to_begin))
        warnings.warn(
            f"train dataloaders {names} have passes open or still to begin in the resumed epoch: Accelerate's "
            "step counter and its gradient sync at the end of a loader follow the most recently begun loader, "
            "and the resumed passes begin in the order the loop asks for them, which can differ from the saving "
            "run's, so optimizer steps can fall on other batches (each loader's samples continue exactly)",
            InexactResumeWarning,
            stacklevel=4,
        )


def _next_save_iteration(accelerator: Any, loaded: int) -> int:
    """The number of the next automatically named ``checkpoint_N``: after the loaded one and after
    any newer folder (one left damaged by a crash, when the run resumed from an older one)."""
    newest = loaded
    folder = os.path.join(accelerator.project_dir or "", "checkpoints")
    if accelerator.project_configuration.automatic_checkpoint_naming and os.path.isdir(folder):
        for name in os.listdir(folder):
            match = re.fullmatch(r"checkpoint_(\d+)", name)
            if match:
                newest = max(newest, int(match.group(1)))
    return newest + 1


def _refuse_a_second_skip(loader: object, index: int, resumed: int) -> None:
    """Raise ``ValueError`` if ``loader`` was made by ``accelerator.skip_first_batches`` (Accelerate's public
    ``SkipBatchSampler`` or ``SkipDataLoader``, or a prepared loader with ``skip_batches``): the resumed pass of
    train dataloader ``index`` already skips the ``resumed`` batches trained before the checkpoint."""
    samplers = (getattr(loader, "batch_sampler", None), getattr(loader, "sampler", None))
    skips = [s.skip_batches for s in samplers if isinstance(s, SkipBatchSampler)]
    skipping = getattr(loader, "skip_batches", 0)
    if isinstance(loader, SkipDataLoader) or skipping:
        skips.append(skipping)
    if skips:
        raise ValueError(
            f"train dataloader {index} was made by accelerator.skip_first_batches (it skips its first {sum(skips)} "
            "batches) and given to progress.train() in the epoch accelerator.load_state resumed, where the prepared "
            f"loader already resumes after the {resumed} batches trained before the checkpoint: batches would be "
            "skipped twice and never trained, or the position lost. Remove the skip_first_batches call and pass the "
            "prepared loader: progress.train() yields exactly the batches not yet trained. Nothing was trained"
        )


def _start_from_the_beginning(loader: object) -> bool:
    """Drop a position Accelerate's ``load_state`` gave a StatefulDataLoader used for evaluation.

    Accelerate restores every stateful loader mid-way, but an evaluation interrupted by a
    checkpoint restarts from its first batch; a restored finished state would also make the
    next epoch build its iterator twice, drawing the global RNG once more. True if it dropped one.
    """
    inner = getattr(loader, "base_dataloader", loader)
    if getattr(inner, "next_iter_state", None) is None:
        return False
    inner.next_iter_state = None  # type: ignore[attr-defined]
    drop_iterator(inner)
    return True
