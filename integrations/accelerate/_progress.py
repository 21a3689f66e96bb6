"""``AcceleratorProgress``: counts an ``accelerate.Accelerator``'s loops and makes ``save_state`` resume exactly."""

from __future__ import annotations

import os
import warnings
import weakref
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, TextIO, overload

import torch

from tracker_core import EventOrderError, InexactResumeWarning, ProgressStateError, ProgressView, StageProgress, Tracker
from tracker_core.adapter import (
    Display,
    ResumeRngCheck,
    TokenCounter,
    abandon_in_flight,
    batches_in,
    bind_lifetime,
)
from tracker_core.adapter import register_progress as attach
from tracker_core.integrations.accelerate._compat import prepared_models, registered_objects
from tracker_core.integrations.accelerate._evaluation import EvaluationPasses
from tracker_core.integrations.accelerate._files import ProgressFiles
from tracker_core.integrations.accelerate._fit import Batch, Fit
from tracker_core.integrations.accelerate._loggers import rewind_trackers
from tracker_core.integrations.accelerate._passes import TrainPasses
from tracker_core.integrations.accelerate._steps import hook_optimizers, no_scaler

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

    Create it after ``accelerator.prepare(...)``; registered for checkpointing last (recommended), it ends each
    ``save_state`` with a commit that ``load_state`` checks. ``count_tokens(batch)``: a batch's tokens (all, or
    ``(tokens, non_padding_tokens)``; default: its ``input_ids`` and ``attention_mask``). ``heartbeat``: the fit's
    heartbeat file, which ``load_state`` reads to record the work a crash lost. See docs/accelerate.md.
    """

    def __init__(
        self,
        accelerator: Any,
        count_tokens: Callable[[Any], int | tuple[int, int]] | None = None,
        heartbeat: str | os.PathLike[str] | None = None,
    ) -> None:
        # weak: the Accelerator holds this progress (its hooks, its registered objects), and one the user drops is
        # freed at once, its loaders' worker processes with it
        self._accelerator_ref = weakref.ref(accelerator)
        self._tracker = Tracker()
        self._files = ProgressFiles(self._tracker, None if heartbeat is None else os.fspath(heartbeat))
        self._progress = self._tracker.progress
        self._train = self._progress.train
        self._tokens = {
            name: TokenCounter(self._progress.stage(name), count_tokens)
            for name in ("train", "validate", "test", "predict")
        }
        self._hooked_optimizers: list[weakref.ref[Any]] = []  # the prepared optimizers counted, by index
        self._check_skips: Callable[[], None] = no_scaler  # the GradScaler's skip check, once per train batch
        self._fit: Fit | None = None  # the open fit run, None outside one
        self._fit_epoch = 0  # the epoch the open fit last began
        self._in_flight: TrainBatch | None = None  # the train batch handed to a loop body
        # the entry (and its held-back warnings) when the last fit was left inside a train pass, until a run begins
        self._cut_fit: tuple[dict[str, Any], list[Warning | str]] | None = None
        self._passes = TrainPasses(self._tracker)
        self._rng_check = ResumeRngCheck(load="accelerator.load_state")  # compared when the fit begins
        self._check_rng_at_pass = False  # and when the first train pass of the resumed epoch begins
        self._evaluations = EvaluationPasses(self._progress, self._tokens, self._rng_check)
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
        """After ``load_state`` (None before): the number of the next automatically named ``checkpoint_N``; set
        ``accelerator.project_configuration.iteration`` to it (docs/accelerate.md, "How resume works")."""
        return self._files.next_save_iteration

    def display(self, stream: TextIO | None = None, terminal: bool | None = None, interval: float = 10.0) -> None:
        """Show the loops' stage, epoch, batch, steps, samples/s and ETA (main process only; docs/display.md)."""
        if self._accelerator.is_main_process:
            self._display = Display(self.view, stream=stream, terminal=terminal, interval=interval)

    def state_dict(self) -> dict[str, str]:
        """What ``register_for_checkpointing(progress)`` stores: a note saying where the progress is. ``save_state``
        calls it after Accelerate's own files, and it commits the save (docs/accelerate.md, "How resume works")."""
        self._files.commit()
        return dict(_REGISTERED_STATE)

    def load_state_dict(self, state: object) -> None:
        """Accept :meth:`state_dict`'s note (``load_state`` already loaded the progress file); loads nothing."""
        if state != _REGISTERED_STATE:
            raise ProgressStateError("", f"expected AcceleratorProgress.state_dict()'s note, got {state!r}")

    @property
    def _accelerator(self) -> Any:
        accelerator = self._accelerator_ref()
        if accelerator is None:
            raise ReferenceError("the Accelerator this AcceleratorProgress tracks was freed")
        return accelerator

    def __getstate__(self) -> dict[str, Any]:
        """Pickled with its Accelerator and without the display (it holds a stream); optimizers pickle without
        torch's step hooks."""
        state = {**self.__dict__, "_display": None, "_hooked_optimizers": [], "_check_skips": no_scaler}
        state["_accelerator_ref"] = self._accelerator
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Register with the unpickled Accelerator; optimizers are hooked again when the next loop begins."""
        self.__dict__.update(state, _accelerator_ref=weakref.ref(state["_accelerator_ref"]))
        attach(self._accelerator, self._progress)

    def fit(self, max_epochs: int) -> Fit:
        """A fit run of ``max_epochs`` train epochs, a context manager: :class:`Fit`."""
        self._hook_optimizers()
        if self._display is not None:
            self._display.set_max_epochs(max_epochs)
        return Fit(self, max_epochs)

    def _begin_fit(self, fit: Fit) -> None:
        if self._fit is not None:  # a fit still open (entered and never left): it ends as if left
            self._leave_fit(self._fit, None)
        self._evaluations.end_left_open()
        self._begin_run("fit")
        self._fit = fit
        self._fit_epoch = -1  # no epoch begun yet
        self._files.beat()  # a process killed before its first save is recorded
        self._rng_check.check("between accelerator.load_state and the fit")  # if one came before
        if not self._check_rng_at_pass:  # the next epoch begins: what it draws, the uninterrupted run drew
            self._rng_check.forget()

    def _begin_train_epoch(self, epoch: int) -> None:
        self._train.epoch_ready()
        self._train.epoch_started()
        self._passes.begin_epoch()
        self._fit_epoch = epoch

    def _leave_fit(self, fit: Fit, ended: str | None) -> None:
        """The ``with`` block of ``fit`` is left: by an exception (``ended``), else before its last epoch or not."""
        if self._fit is not fit:  # completed, or a load_state or another fit took over
            return
        if ended is not None and self._in_flight is not None:  # the exception left the train pass in its body
            self._leave_pass(self._in_flight)
        if ended is None and (self._fit_epoch + 1 < fit.max_epochs or self._passes.left):  # left before its end
            ended = "stopped_early"
        if self._passes.left:  # inside a train pass: a save_state after the block saves the progress of now
            with warnings.catch_warnings(record=True) as held_back:
                warnings.simplefilter("always")
                entry = self._tracker.state_dict()
            self._cut_fit = entry, [warning.message for warning in held_back]
        self._end_fit(ended)

    def _end_train_epoch(self) -> None:
        self._end_train_batch()
        self._passes.end_epoch()
        epochs = self.view.train.epochs.lifetime
        if epochs.started != epochs.processed:
            self._train.epoch_processed()
            self._train.epoch_completed()

    def _end_fit(self, ended: str | None = None) -> None:
        """End the fit run: completed, or ``ended`` (``crashed``, ``interrupted``, ``stopped_early``)."""
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
        """One train epoch's pass over the prepared ``loader`` (train dataloader ``index``); ``with_index=True`` yields
        ``(batch_index, batch)``, counted from the epoch's start across a resume. A ``save_state`` in the loop body
        counts the batch as trained: save after its step. See docs/accelerate.md."""
        return self._shown(self._train_pass(loader, index, with_index), "train", loader)

    def _train_pass(self, loader: Iterable[Batch], index: int, with_index: bool) -> Generator[Any, None, None]:
        if self._passes.check_resumed(loader, index) and self._fit is not None:  # its epoch restarts: so do its counts
            self._restart_epoch([index], "a StatefulDataLoader prepared after accelerator.load_state")
            self._progress.run_ready("fit")  # re-entered: counts nothing
            self._progress.run_started()
            self._begin_train_epoch(self._fit_epoch)
        if self._check_rng_at_pass:  # it resumes the saved epoch: nothing may have drawn since the load
            self._check_rng_at_pass = False
            where = "between accelerator.load_state and the first train pass of the resumed epoch"
            self._rng_check.check(f"{where} (e.g. in the epoch loop's body before it)")
        self._rng_check.forget()  # spent; else a new epoch draws first
        self._hook_optimizers()
        train, accelerator, tokens = self._train, self._accelerator, self._tokens["train"]
        if not self._passes.begin(loader, index, accelerator):  # nothing is left of the pass
            return
        mine = TrainBatch(index)  # this pass's batch in a loop body, reused batch after batch
        turn = train.batch_turner(index)  # ends the batch in flight and begins the next (ValueError: index < 0)
        batch_index = self.view.train.dataloaders[index].batches.epoch  # the turner made the loader's counts
        outside = False
        over = False  # the loop body handed the batch back: its step is over (counts only while mine is in flight)
        self._tracker.train_iterators_building()  # the user's code before the pass ran: its reseed stays
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
                        self._tracker.train_iterators_built()  # a resumed pass's iterator is built: its draws undone
                        self._evaluations.restored_rng = None  # a later evaluation is not the one saved mid-way
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
                yield (batch_index, batch) if with_index else batch
                batch_index += 1
                over = True
        except GeneratorExit:  # the loop body left (break, exception)
            self._leave_pass(mine)
            raise
        finally:  # the pass ended, or its loader raised: the last batch's step is over
            if self._in_flight is mine and over:
                self._end_train_batch()

    def _leave_pass(self, mine: TrainBatch) -> None:
        """The loop body left a pass: its batch is trained if a save, ``accumulate`` or a step saw it, else undone."""
        self._passes.left.add(mine.loader)
        if self._in_flight is not mine:
            return
        if mine.processed or mine.step != self._accelerator.step or self._train.stepped_in_batch:
            self._end_train_batch()
        else:
            self._in_flight = None
            self._train.cancel_batch()

    def _end_train_batch(self) -> None:
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
        return batches if self._display is None else self._display.iterate(batches, stage, batches_in(loader))

    def _begin_run(self, kind: str) -> bool:
        """Begin a ``kind`` run unless a fit is open (False), continuing the prepared models' ``track_lifetime``."""
        self._cut_fit = None
        if self._fit is not None:
            return False
        for model in prepared_models(self._accelerator):
            bind_lifetime(model, self._progress)
        self._progress.run_ready(kind)
        self._progress.run_started()
        return True

    def track_train_loader(self, loader: object, index: int = 0) -> None:
        """Make the prepared train ``loader`` (train dataloader number ``index``) resumable mid-epoch, as :meth:`train`
        does; before ``load_state``, so that a saved position that does not fit it is refused there."""
        if issubclass(type(loader), torch.utils.data.DataLoader):  # type(): a prepared loader only poses as one
            raise ValueError(
                f"track_train_loader takes the loader accelerator.prepare() returned, which the loop iterates: train "
                f"dataloader {index} is a {type(loader).__name__} Accelerate did not prepare, whose restored position "
                "the loop would miss. Pass the prepared one (nothing was changed; one never prepared needs no call)"
            )
        self._passes.track(loader, index)

    def _hook_optimizers(self) -> None:
        self._hooked_optimizers, self._check_skips = hook_optimizers(
            self._accelerator, self._train, self._hooked_optimizers
        )

    def _note(self, message: str) -> None:
        """Note what the loops could not follow (``view.anomalies``); warn the first time."""
        self._progress.note_anomaly(message, framework="Accelerate")

    def _on_save(self, models: list[torch.nn.Module], weights: list[Any], output_dir: str) -> None:
        batch = self._in_flight
        if batch is not None and not batch.processed:  # saved from the loop body: the batch's step is done
            _warn_if_step_to_come(self._accelerator, self._train.stepped_in_batch)
            self._check_skips()
            self._train.batch_processed_of(batch.batch, batch.loader)
            self._tokens["train"](batch.batch)
            batch.processed = True
        cut, accelerator = self._cut_fit, self._accelerator
        entry = self._tracker.state_dict() if cut is None else _warned_now(*cut)
        self._files.save(
            accelerator,
            models,
            output_dir,
            entry,
            self._passes.saved_iterations(entry, in_epoch=cut is not None),
            self._evaluations.saved_rng(None if batch is None else batch.loader),
            registered=any(obj is self for obj in registered_objects(accelerator)),
        )

    def _restart_epoch(self, whole: list[int], why: str = "a plain DataLoader") -> None:
        """Accelerate's loop reads the ``whole`` loaders saved inside their pass from their first batch (``why``): the
        resumed epoch restarts (warned). ``accelerator.step`` and the partial gradients stay as loaded, as in
        Accelerate's own loop."""
        trained = ", ".join(f"{self.view.train.dataloaders[i].batches.epoch} of train dataloader {i}" for i in whole)
        epoch = self.view.epoch_index
        self._check_rng_at_pass = False  # a new order is drawn: nothing to compare
        abandon_in_flight(self._progress, reenter=True)  # the fit run goes on; the unfinished epoch is dropped
        self._progress.note_anomaly(  # recorded, not warned again
            f"accelerator.load_state restarted train epoch {epoch} from its first batch: it was saved after {trained} "
            f"({why}, which Accelerate's loop reads whole); those batches stay trained and counted in the "
            "lifetime counts, the epoch's counts start again"
        )

    def _on_load(self, models: list[torch.nn.Module], input_dir: str) -> None:
        """Load the progress before Accelerate loads anything; a loop still open counts nothing more."""
        found = self._files.load(self._accelerator, models, input_dir)
        self._in_flight, self._fit, self._evaluations.open, self._cut_fit = None, None, None, None
        resuming_epoch = self.view.train.epochs.lifetime.in_flight
        if found.ranks is None:  # Accelerate restores the same RNGs after this hook (saved at one instant)
            self._rng_check.loaded()
        else:  # another world size: this rank's RNGs come from another saved rank than Accelerate's file
            self._rng_check.forget()
        self._check_rng_at_pass = resuming_epoch
        entry = found.own.tracker if found.ranks is None else found.ranks[0].tracker
        self._evaluations.restore(found.own.evaluation_rng, entry)
        plain = self._passes.restore(found.own.loader_iterations, resuming_epoch, entry)
        if plain:
            self._restart_epoch(plain)
        rewind_trackers(self._accelerator, self.view.global_step)  # init_trackers' trackers continue at this step


def _warned_now(entry: dict[str, Any], held_back: list[Warning | str]) -> dict[str, Any]:
    """``entry``, taken earlier, for the ``save_state`` under way, which gives the warnings its taking held back."""
    for warning in held_back:
        warnings.warn(warning, stacklevel=4)
    return entry


def _warn_if_step_to_come(accelerator: Any, stepped: bool) -> None:
    """A ``save_state`` in the loop body of a batch that ends an accumulation window, before its optimizer step."""
    if accelerator.gradient_accumulation_steps > 1 and accelerator.sync_gradients and not stepped:
        warnings.warn(
            "save_state in the loop body of a batch that ends a gradient accumulation window (sync_gradients), "
            "before its optimizer step: the checkpoint counts the batch as trained but holds neither that step nor "
            "the window's gradients, so the resumed run never takes it. Save after optimizer.step()",
            InexactResumeWarning,
            stacklevel=4,
        )
