"""``AcceleratorProgress``: counts an ``accelerate.Accelerator``'s loops, which report to it (Accelerate has no
callbacks), and makes ``save_state`` resume exactly. See docs/accelerate.md."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, TextIO, TypeVar, overload

import torch

from tracker_core import EventOrderError, ProgressStateError, ProgressView, StageProgress, Tracker
from tracker_core.adapter import Display, ResumeRngCheck, TokenCounter, batches_in, bind_lifetime
from tracker_core.adapter import register_progress as attach
from tracker_core.integrations.accelerate._compat import prepared_models, registered_objects
from tracker_core.integrations.accelerate._evaluation import EvaluationPasses
from tracker_core.integrations.accelerate._files import ProgressFiles
from tracker_core.integrations.accelerate._fit import Fit
from tracker_core.integrations.accelerate._loggers import rewind_trackers
from tracker_core.integrations.accelerate._passes import TrainPasses
from tracker_core.integrations.accelerate._steps import hook_optimizers, no_scaler

__all__ = ["AcceleratorProgress"]

Batch = TypeVar("Batch")
_REGISTERED_STATE = {"saved_by": "AcceleratorProgress", "file": "progress_tracker_{rank}.pt"}


@dataclass(slots=True)
class TrainBatch:
    """The batch of one train pass in a loop body (one object per pass, refilled for each batch)."""

    loader: int  # train dataloader index
    step: int = 0  # accelerator.step when it was fetched
    processed: bool = False  # a save_state in the loop body counted its step
    batch: Any = None  # the batch itself (its samples and tokens are counted when it is processed)


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
        self._tracker = Tracker()
        self._files = ProgressFiles(accelerator, self._tracker, None if heartbeat is None else os.fspath(heartbeat))
        self._progress = self._tracker.progress
        self._train = self._progress.train
        self._tokens = {
            name: TokenCounter(self._progress.stage(name), count_tokens)
            for name in ("train", "validate", "test", "predict")
        }
        self._hooked_optimizers = 0
        self._check_skips: Callable[[], None] = no_scaler  # the GradScaler's skip check, once per train batch
        self._fit: Fit | None = None  # the open fit run, None outside one
        self._fit_at = (0, 0)  # the epoch the open fit last began, and its max_epochs
        self._in_flight: TrainBatch | None = None  # the train batch handed to a loop body
        self._warned = False  # an anomaly warned already
        self._passes = TrainPasses(accelerator, self._tracker)
        # The global RNGs load_state restored, compared when the fit begins and, if the saved epoch
        # is resumed, when its first train pass begins (_check_rng_at_pass)
        self._rng_check = ResumeRngCheck(load="accelerator.load_state")
        self._evaluations = EvaluationPasses(self._progress, self._tokens, self._rng_check)
        self._check_rng_at_pass = False
        self._display: Display | None = None  # set by display(); None: the loops show nothing
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
        return self._files.next_save_iteration

    def display(self, stream: TextIO | None = None, terminal: bool | None = None, interval: float = 10.0) -> None:
        """Show the loops' stage, epoch, batch, steps, samples/s and ETA (main process only).

        On a terminal a live line (with rich); elsewhere a line every ``interval`` seconds
        and at each epoch end, to ``stream`` (standard output by default). See docs/display.md.
        """
        if self._accelerator.is_main_process:
            self._display = Display(self.view, stream=stream, terminal=terminal, interval=interval)

    def state_dict(self) -> dict[str, str]:
        """What ``accelerator.register_for_checkpointing(progress)`` stores: only a note saying where the
        progress is. ``save_state`` calls it after writing Accelerate's own files (and the objects registered
        before this one), and it commits that save: each process writes its ``progress_tracker_{rank}.pt``, and
        rank 0 its own last, once the other processes' files of this save are in the folder (it waits for them
        ``PATIENCE_S`` at most, never in a barrier), listing the size and CRC-32 of every other file then
        in the folder. A rank whose file did not come is left out of the commit, with a warning: ``load_state``
        refuses the folder (``save_state`` called on the main process only cannot be resumed)."""
        self._files.commit()
        return dict(_REGISTERED_STATE)

    def load_state_dict(self, state: object) -> None:
        """Accept :meth:`state_dict`'s note (``load_state`` already loaded the progress file); loads nothing."""
        if state != _REGISTERED_STATE:
            raise ProgressStateError("", f"expected AcceleratorProgress.state_dict()'s note, got {state!r}")

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the display (it holds a stream); optimizers pickle without torch's step hooks."""
        state = self.__dict__.copy()
        state.update(_display=None, _hooked_optimizers=0, _check_skips=no_scaler)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Register with the unpickled Accelerator; optimizers are hooked again when the next loop begins."""
        self.__dict__.update(state)
        attach(self._accelerator, self._progress)

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
        self._evaluations.end_left_open()
        self._begin_run("fit")
        self._fit = fit
        self._files.beat()  # a process killed before its first save is recorded
        if self._rng_check.armed:
            self._rng_check.check("between accelerator.load_state and the fit")
            if not self._check_rng_at_pass:  # the next epoch begins: what it draws, the uninterrupted run drew
                self._rng_check.forget()

    def _begin_train_epoch(self, epoch: int, max_epochs: int) -> None:
        self._train.epoch_ready()
        self._train.epoch_started()
        self._passes.begin_epoch()
        self._fit_at = (epoch, max_epochs)

    def _leave_fit(self, fit: Fit, ended: str | None) -> None:
        """The ``with`` block of ``fit`` is left: by an exception (``ended``), else before its last epoch or not."""
        if self._fit is not fit:  # completed, or a load_state or another fit took over
            return
        batch = self._in_flight
        if ended is not None and batch is not None:  # the exception left the train pass in its body
            self._passes.left.add(batch.loader)
            self._end_left_batch(batch)
        self._end_fit(ended or self._left_early())

    def _left_early(self) -> str | None:
        """How the open fit run ends when its block is left without an exception: ``stopped_early`` before its
        last epoch or in the middle of a train pass, else completed (None)."""
        epoch, max_epochs = self._fit_at
        return "stopped_early" if epoch + 1 < max_epochs or self._passes.left else None

    def _end_train_epoch(self) -> None:
        self._end_train_batch()
        self._passes.end_epoch()
        train = self._train
        epochs = self.view.train.epochs.lifetime
        if epochs.started != epochs.processed:
            train.epoch_processed()
            train.epoch_completed()

    def _end_fit(self, ended: str | None = None) -> None:
        """End the fit run: completed, or ``ended`` (``crashed``, ``interrupted``, ``stopped_early``) in the run ledger."""
        self._evaluations.end_left_open()
        self._end_train_epoch()
        self._fit = None
        if not self.view.run.counts.in_flight:  # a refused load put back the record from before the fit
            return
        if ended is not None:
            self._progress.note_run_end(ended)
        self._progress.run_processed()
        self._progress.run_completed()

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
        return self._shown(self._train_pass(loader, index, with_index), "train", loader)

    def _begin_pass(self, loader: Iterable[Any], index: int) -> bool:
        """Begin the train pass of dataloader ``index``; False when nothing is left of it (restored after its end)."""
        self._passes.refuse_a_second_skip(loader, index)
        if self._rng_check.armed:
            self._first_pass_after_load()
        self._hook_optimizers()
        self._passes.track(loader, index)
        return self._passes.begin(loader, index, self._note)

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
                        self._end_train_batch()  # the batch before, of another pass or processed by a save
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
            self._passes.left.add(index)
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

    def evaluate(self, loader: Iterable[Batch], index: int = 0) -> Iterator[Batch]:
        """One validation epoch; inside :meth:`fit` it belongs to the fit run, else it is a validate run."""
        return self._evaluation_loop(self._progress.validate, loader, index)

    def test(self, loader: Iterable[Batch], index: int = 0) -> Iterator[Batch]:
        """One test epoch (a test run of its own outside :meth:`fit`)."""
        return self._evaluation_loop(self._progress.test, loader, index)

    def predict(self, loader: Iterable[Batch], index: int = 0) -> Iterator[Batch]:
        """One predict epoch (a predict run of its own outside :meth:`fit`)."""
        return self._evaluation_loop(self._progress.predict, loader, index)

    def _evaluation_loop(self, stage: StageProgress, loader: Iterable[Batch], index: int) -> Iterator[Batch]:
        return self._shown(self._evaluations.run(stage, loader, index, self._begin_run), stage.name, loader)

    def _shown(self, batches: Generator[Any, None, None], stage: str, loader: Iterable[Any]) -> Iterator[Any]:
        """The loop's batches, shown by the display if there is one."""
        return batches if self._display is None else self._display.iterate(batches, stage, batches_in(loader))

    def _begin_run(self, kind: str) -> bool:
        """Begin a ``kind`` run, unless a fit run is open (False); prepared models that carry their lifetime
        (``track_lifetime``) continue it and carry this record."""
        if self._fit is not None:
            return False
        for model in prepared_models(self._accelerator):
            bind_lifetime(model, self._progress)
        self._progress.run_ready(kind)
        self._progress.run_started()
        return True

    def track_train_loader(self, loader: object, index: int = 0) -> None:
        """Make the prepared train ``loader`` (train dataloader number ``index``) resumable mid-epoch.

        :meth:`train` does this itself; call it before ``load_state`` so that a saved loader
        position that does not fit this loader is refused there, before anything is loaded.
        """
        self._passes.track(loader, index)

    def _hook_optimizers(self) -> None:
        """Count the steps of prepared optimizers not hooked yet, and of the GradScaler and schedulers anew."""
        self._hooked_optimizers, self._check_skips = hook_optimizers(
            self._accelerator, self._train, self._hooked_optimizers
        )

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

    def _on_save(self, models: list[torch.nn.Module], weights: list[Any], output_dir: str) -> None:
        batch = self._in_flight
        if batch is not None and not batch.processed:  # saved from the loop body: the batch's step is done
            self._check_skips()
            self._train.batch_processed_of(batch.batch, batch.loader)
            self._tokens["train"](batch.batch)
            batch.processed = True
        evaluation = self._evaluations.open
        self._files.save(
            models,
            output_dir,
            self._passes.saved_iterations(),
            None if evaluation is None else (evaluation.stage.name, evaluation.rng),
            registered=any(obj is self for obj in registered_objects(self._accelerator)),
        )

    def _on_load(self, models: list[torch.nn.Module], input_dir: str) -> None:
        """Load the progress (:meth:`ProgressFiles.load`) before Accelerate loads anything; a loop still open counts
        nothing more: the loaded run continues in the next loop."""
        found = self._files.load(models, input_dir)
        self._in_flight, self._fit, self._evaluations.open = None, None, None
        resuming_epoch = self.view.train.epochs.lifetime.in_flight
        if found.ranks is None:  # Accelerate restores the same RNGs after this hook (saved at one instant)
            self._rng_check.loaded()
            self._check_rng_at_pass = resuming_epoch
        else:  # another world size: this rank's RNGs come from another saved rank than Accelerate's file
            self._rng_check.forget()
        self._evaluations.restored_rng = found.own.evaluation_rng
        self._passes.restore(found.own.loader_iterations, resuming_epoch)
        rewind_trackers(self._accelerator, self.view.global_step)  # init_trackers' trackers continue at this step
