"""Hugging Face Accelerate adapter: one object that counts progress and makes ``save_state`` resume exactly.

Accelerate has no callbacks, so the loops themselves report::

    progress = AcceleratorProgress(accelerator)  # after accelerator.prepare(...)
    for epoch in progress.epochs(3):
        for batch in progress.train(train_loader):
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
from collections.abc import Generator, Iterable, Iterator
from typing import Any, TextIO, TypeVar

import torch

from tracker_core import ProgressView, Tracker, count_optimizer_steps
from tracker_core.adapter import (
    Display,
    GlobalRng,
    StageProgress,
    batches_in,
    capture_gradients,
    count_scheduler_steps,
    count_skipped_steps,
    restore_gradients,
    samples_in,
)
from tracker_core.adapter import register_progress as attach
from tracker_core.integrations import _accelerate_checkpoint as checkpoint
from tracker_core.integrations.accelerate import _elastic as elastic
from tracker_core.integrations.accelerate._compat import (
    create_seedable_generator,
    drop_iterator,
    prepared_optimizers,
    prepared_schedulers,
)

__all__ = ["AcceleratorProgress"]

Batch = TypeVar("Batch")
_NONE_IN_FLIGHT = -1


class AcceleratorProgress:
    """Progress of an ``accelerate.Accelerator``'s loops, saved and loaded by its ``save_state``/``load_state``.

    Create it after ``accelerator.prepare(...)``; iterate through :meth:`epochs`,
    :meth:`train`, :meth:`evaluate`, :meth:`test` and :meth:`predict`. Optimizer steps
    are counted on the prepared optimizers' real steps (Accelerate's ``step()`` is a
    no-op outside a ``sync_gradients`` window). ``save_state`` writes
    ``progress_tracker_{rank}.pt`` beside Accelerate's files; ``load_state`` validates it
    before Accelerate loads anything (``ProgressStateError``, nothing loaded).
    """

    def __init__(self, accelerator: Any) -> None:
        self._accelerator = accelerator
        self._tracker = Tracker()
        self._progress = self._tracker.progress
        self._train = self._progress.train
        self._hooked_optimizers = 0
        self._in_fit = False
        # The train batch yielded to the loop body: its sample count (or -1) and dataloader index.
        self._in_flight = _NONE_IN_FLIGHT
        self._in_flight_loader = 0
        self._loaders: dict[int, Any] = {}  # train dataloader index -> the prepared loader
        self._pass_start: dict[int, int] = {}  # index -> loader.iteration when its last train pass began
        self._restored_iterations: dict[int, int] = {}  # index -> loader.iteration to set before the next pass
        self._finished_passes: set[int] = set()  # restored mid-epoch after the pass yielded its last batch
        self._restored_step: int | None = None  # accelerator.step after an elastic load, set when the pass begins
        # The global RNGs when the running evaluation epoch began (stage name, snapshot): an evaluation
        # saved mid-way restarts, so it must restart from these, not from the RNGs at the save.
        self._evaluation_rng: tuple[str, GlobalRng] | None = None
        self._restored_evaluation_rng: tuple[str, GlobalRng] | None = None
        # index -> the pending state our load left in a train StatefulDataLoader (Accelerate then overwrites it)
        self._armed_states: dict[int, dict[str, Any] | None] = {}
        self._display: Display | None = None  # set by display(); None: the loops show nothing
        attach(accelerator, self._progress)
        accelerator.register_save_state_pre_hook(self._on_save)
        accelerator.register_load_state_pre_hook(self._on_load)
        self._hook_optimizers()

    @property
    def view(self) -> ProgressView:
        """The read-only progress, as ``tracker_core.get_progress(accelerator)`` returns it."""
        return self._progress.view

    def display(self, stream: TextIO | None = None, terminal: bool | None = None, interval: float = 10.0) -> None:
        """Show the loops' stage, epoch, batch, steps, samples/s and ETA (main process only).

        On a terminal a live line (with rich); elsewhere a line every ``interval`` seconds
        and at each epoch end, to ``stream`` (standard output by default). See docs/display.md.
        """
        if self._accelerator.is_main_process:
            self._display = Display(self.view, stream=stream, terminal=terminal, interval=interval)

    # loops -------------------------------------------------------------------------------
    def epochs(self, max_epochs: int) -> Iterator[int]:
        """A fit run: yields the 0-based index of each train epoch until ``max_epochs`` are done.

        After ``load_state`` it continues the restored run: an epoch saved mid-way is
        yielded again and its :meth:`train` pass yields only the batches not yet trained.
        """
        self._hook_optimizers()
        if self._display is not None:
            self._display.set_max_epochs(max_epochs)
        progress, train, view = self._progress, self._train, self._progress.view
        progress.run_ready("fit")
        progress.run_started()
        self._in_fit = True
        while view.epoch_index < max_epochs:
            train.epoch_ready()
            train.epoch_started()
            yield view.epoch_index
            train.epoch_processed()
            train.epoch_completed()
        self._in_fit = False
        progress.run_processed()
        progress.run_completed()

    def train(self, loader: Iterable[Batch], index: int = 0) -> Iterator[Batch]:
        """One train epoch's pass over the prepared ``loader`` (train dataloader number ``index``).

        A batch is ready and started when fetched, processed and completed when the loop
        body hands control back. A ``save_state`` inside the body counts the current batch
        as processed: save after the batch's step, as Accelerate's examples do.
        """
        batches = self._train_pass(loader, index)
        if self._display is None:
            return batches
        return self._display.iterate(batches, "train", batches_in(loader))

    def _train_pass(self, loader: Iterable[Batch], index: int) -> Generator[Batch, None, None]:
        self._track(loader, index)
        if self._restored_step is not None:  # after Accelerate's load_state restored the old geometry's
            self._accelerator.step, self._restored_step = self._restored_step, None
        pass_start = getattr(loader, "iteration", None)
        if pass_start is not None:
            self._pass_start[index] = pass_start
        if index in self._finished_passes:
            # Nothing is left of this pass; Accelerate's loaders fail on an empty pass (an iterable
            # one raises), so only the inner loader is run, to spend its armed position.
            self._finished_passes.discard(index)
            for _ in getattr(loader, "base_dataloader", loader):  # type: ignore[attr-defined]
                raise RuntimeError("a pass saved as finished yielded another batch on resume")
            if pass_start is not None:
                loader.iteration = pass_start + 1  # type: ignore[attr-defined]
            return
        train = self._train
        try:
            for batch in loader:
                train.batch_begin()
                self._in_flight_loader = index
                self._in_flight = samples_in(batch)
                yield batch
                if self._in_flight != _NONE_IN_FLIGHT:
                    train.batch_end(self._in_flight, index)
                    self._in_flight = _NONE_IN_FLIGHT
                else:  # a save_state in the loop body processed it
                    train.batch_completed()
        except GeneratorExit:  # the loop body broke out: its batch was trained
            if self._in_flight != _NONE_IN_FLIGHT:
                train.batch_processed(self._in_flight, index)
                self._in_flight = _NONE_IN_FLIGHT
            if self.view.train.batches.lifetime.in_flight:
                train.batch_completed()
            raise

    def evaluate(self, loader: Iterable[Batch], index: int = 0) -> Iterator[Batch]:
        """One validation epoch; inside :meth:`epochs` it belongs to the fit run, else it is a validate run."""
        return self._evaluation(self._progress.validate, "validate", loader, index)

    def test(self, loader: Iterable[Batch], index: int = 0) -> Iterator[Batch]:
        """One test epoch (a test run of its own outside :meth:`epochs`)."""
        return self._evaluation(self._progress.test, "test", loader, index)

    def predict(self, loader: Iterable[Batch], index: int = 0) -> Iterator[Batch]:
        """One predict epoch (a predict run of its own outside :meth:`epochs`)."""
        return self._evaluation(self._progress.predict, "predict", loader, index)

    def _evaluation(self, stage: StageProgress, kind: str, loader: Iterable[Batch], index: int) -> Iterator[Batch]:
        batches = self._evaluation_pass(stage, kind, loader, index)
        if self._display is None:
            return batches
        return self._display.iterate(batches, stage.name, batches_in(loader))

    def _evaluation_pass(
        self, stage: StageProgress, kind: str, loader: Iterable[Batch], index: int
    ) -> Generator[Batch, None, None]:
        """One evaluation epoch. It leaves the global RNGs as it found them, so training continues
        identically however often it evaluates, and an evaluation restarted after a resume
        (an unfinished one is run again from its start) changes nothing either."""
        progress = self._progress
        restored, self._restored_evaluation_rng = self._restored_evaluation_rng, None
        if restored is not None and restored[0] == stage.name:
            restored[1].apply()  # after load_state, whose own RNG file holds the save instant's RNGs
        own_run = not self._in_fit
        if own_run:
            progress.run_ready(kind)
            progress.run_started()
        _start_from_the_beginning(loader)
        rng = GlobalRng.capture()
        self._evaluation_rng = (stage.name, rng)
        stage.epoch_ready()
        stage.epoch_started()
        samples = 0
        try:
            for batch in loader:
                stage.batch_begin()
                samples = samples_in(batch)
                yield batch
                stage.batch_end(samples, index)
        except GeneratorExit:  # the loop body broke out: the epoch was cut short on purpose
            if progress.view.stage(stage.name).batches.lifetime.in_flight:
                stage.batch_end(samples, index)
            self._end_evaluation(stage, rng, own_run)
            raise
        self._end_evaluation(stage, rng, own_run)

    def _end_evaluation(self, stage: StageProgress, rng: GlobalRng, own_run: bool) -> None:
        self._evaluation_rng = None
        rng.apply()
        stage.epoch_processed()
        stage.epoch_completed()
        if own_run:
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
            loader.iteration = restored  # type: ignore[attr-defined]
        inner = getattr(loader, "base_dataloader", loader)
        if index in self._armed_states:  # undo Accelerate's own restore of this loader (dl_state_dict.bin)
            inner.next_iter_state = self._armed_states.pop(index)  # type: ignore[attr-defined]
            drop_iterator(inner)
        create_seedable_generator(inner)
        self._tracker.track_train_loader(inner, index)

    def _hook_optimizers(self) -> None:
        """Count real steps of prepared optimizers not hooked yet, on the torch optimizer inside each, and
        the steps of every prepared scheduler's torch scheduler (counting one again counts it once)."""
        optimizers = prepared_optimizers(self._accelerator)
        train = self._train
        for index in range(self._hooked_optimizers, len(optimizers)):
            prepared = optimizers[index]
            inner: torch.optim.Optimizer = getattr(prepared, "optimizer", prepared)
            count_optimizer_steps(train, [inner], first_index=index)
            if getattr(prepared, "scaler", None) is not None:
                count_skipped_steps(train, prepared.scaler, [inner], first_index=index)
        self._hooked_optimizers = len(optimizers)
        count_scheduler_steps(train, [getattr(s, "scheduler", s) for s in prepared_schedulers(self._accelerator)])

    def _parameters(self, models: list[torch.nn.Module]) -> list[torch.nn.Parameter]:
        return [p for model in models for p in model.parameters()]

    # checkpoints ---------------------------------------------------------------------------
    def _on_save(self, models: list[torch.nn.Module], weights: list[Any], output_dir: str) -> None:
        if self._in_flight != _NONE_IN_FLIGHT:  # saved from the loop body: the batch's step is done
            self._train.batch_processed(self._in_flight, self._in_flight_loader)
            self._in_flight = _NONE_IN_FLIGHT
        accelerator = self._accelerator
        iterations: list[checkpoint.LoaderIteration | None] = []
        for index in range(max(self._loaders, default=-1) + 1):
            loader = self._loaders.get(index)
            now = getattr(loader, "iteration", None)
            finished = bool(getattr(loader, "end_of_dataloader", False))
            iterations.append(
                None if now is None else checkpoint.LoaderIteration(now, self._pass_start.get(index), finished)
            )
        saved = checkpoint.SavedProgress(
            world_size=accelerator.num_processes,
            tracker=self._tracker.state_dict(),
            gradients=capture_gradients(self._parameters(models)),
            save_iteration=accelerator.project_configuration.iteration,
            loader_iterations=iterations,
            weights_crc32=checkpoint.weights_crc32(weights),  # ties Accelerate's files to this save
            optimizers_crc32=[checkpoint.state_crc32(o.state_dict()) for o in prepared_optimizers(accelerator)],
            evaluation_rng=self._evaluation_rng,
        )
        checkpoint.write(output_dir, accelerator.process_index, saved)

    def _on_load(self, models: list[torch.nn.Module], input_dir: str) -> None:
        """Validate and load before Accelerate loads anything, so a bad file leaves all unchanged.

        Saved by another number of processes, every saved rank's file is read and the core maps
        the data position by global samples (``tracker_core/distributed/_elastic.py``); this process takes the
        rest (gradients, loader epochs, RNGs) from saved rank ``process_index % saved world size``.
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
        self._in_flight = _NONE_IN_FLIGHT
        accelerator.project_configuration.iteration = _next_save_iteration(accelerator, saved.save_iteration)
        resuming_epoch = self.view.train.epochs.lifetime.in_flight
        self._restored_evaluation_rng = saved.evaluation_rng
        self._armed_states = {
            index: inner.next_iter_state
            for index, loader in self._loaders.items()
            if hasattr(inner := getattr(loader, "base_dataloader", loader), "next_iter_state")
        }
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


def _start_from_the_beginning(loader: object) -> None:
    """Drop a position Accelerate's ``load_state`` gave a StatefulDataLoader used for evaluation.

    Accelerate restores every stateful loader mid-way, but an evaluation interrupted by a
    checkpoint restarts from its first batch; a restored finished state would also make the
    next epoch build its iterator twice, drawing the global RNG once more.
    """
    inner = getattr(loader, "base_dataloader", loader)
    if getattr(inner, "next_iter_state", None) is not None:
        inner.next_iter_state = None  # type: ignore[attr-defined]
        drop_iterator(inner)
