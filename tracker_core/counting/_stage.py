"""The counts of one stage (train, validate, test or predict) and the owner's API to advance them."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from tracker_core._errors import EventOrderError
from tracker_core.counting._batch_size import samples_in
from tracker_core.counting._counts import Phased, Tally
from tracker_core.counting._tokens import _TokenTally
from tracker_core.vocabulary import CANCELLED, Event, Phase, Stage

if TYPE_CHECKING:
    from tracker_core.counting._progress import Progress
    from tracker_core.counting._view import StageView


class DataloaderTallies:
    """Batches and samples processed from one dataloader of a stage."""

    __slots__ = ("batches", "samples")

    def __init__(self) -> None:
        self.batches = Tally()
        self.samples = Tally()


class StageProgress:
    """Epochs, batches, samples and per-dataloader counts of one stage, marked one :class:`tracker_core.Phase`
    at a time by the loop or adapter that owns the tracker; consumers read the view."""

    __slots__ = (
        "_at",
        "_at_batch_completed",
        "_at_batch_processed",
        "_at_batch_ready",
        "_at_batch_started",
        "_batches",
        "_dataloaders",
        "_epochs",
        "_non_padding_tokens",
        "_progress",
        "_resuming_epoch",
        "_samples",
        "_seconds",
        "_tokens",
        "name",
    )

    def __init__(self, name: Stage, progress: Progress) -> None:
        self.name = name.value
        self._progress = progress
        self._epochs = Phased(f"{name} epoch")
        self._batches = Phased(f"{name} batch")
        self._samples = Tally()
        self._tokens = _TokenTally()  # counted by a TokenCounter or count_tokens
        self._non_padding_tokens = _TokenTally()
        self._seconds = Tally()  # wall-clock microseconds inside this stage's epochs (Progress._enter_clock)
        self._dataloaders: list[DataloaderTallies] = []
        self._resuming_epoch = False
        self._at: dict[tuple[str, str], tuple[str, str, str]] = {
            (event, phase): (self.name, event.value, str(phase))
            for event in (Event.EPOCH, Event.BATCH)
            for phase in (*Phase, CANCELLED)
        }
        at_batch = (self._at[Event.BATCH, phase] for phase in Phase)  # read per batch: one attribute each
        self._at_batch_ready, self._at_batch_started, self._at_batch_processed, self._at_batch_completed = at_batch

    @property
    def view(self) -> StageView:
        """The read-only counts of this stage (what consumers see)."""
        return self._progress.view.stage(self.name)

    # epochs -----------------------------------------------------------------
    def epoch_ready(self) -> None:
        """An epoch is about to begin. Re-entering an epoch restored mid-way counts nothing (its clock runs)."""
        self._progress._enter_clock(self)
        if self._resuming_epoch:
            return
        self._epochs.mark_ready()
        self._batches.epoch_base = self._batches.completed
        self._seconds.begin_epoch()
        for tally in self._tallies():
            tally.begin_epoch()
        self._progress._where = self._at[Event.EPOCH, Phase.READY]

    def epoch_started(self) -> None:
        """The epoch's start hooks are done."""
        if self._resuming_epoch:
            return
        self._epochs.mark_started()
        self._progress._where = self._at[Event.EPOCH, Phase.STARTED]

    def epoch_processed(self) -> None:
        """Every batch of the epoch is done (or the epoch was cut short on purpose)."""
        self._resuming_epoch = False
        self._epochs.mark_processed()
        self._progress._where = self._at[Event.EPOCH, Phase.PROCESSED]

    def epoch_completed(self) -> None:
        """The epoch's end hooks are done."""
        self._epochs.mark_completed()
        self._progress._leave_clock(self)
        self._progress._where = self._at[Event.EPOCH, Phase.COMPLETED]

    # batches: one code path per mark; the fused marks call the phase marks ------------------------
    def batch_ready(self) -> None:
        """A batch was fetched from the data."""
        batches = self._batches
        if batches.ready != batches.completed:
            raise EventOrderError(f"{self.name} batch: ready while the previous one is not completed")
        epochs = self._epochs
        if epochs.ready == epochs.completed:
            raise EventOrderError(f"{self.name} batch: ready outside an epoch")
        batches.ready += 1
        self._resuming_epoch = False
        self._progress._where = self._at_batch_ready

    def batch_started(self) -> None:
        """The batch's start hooks are done."""
        batches = self._batches
        if batches.started == batches.ready:
            raise EventOrderError(f"{self.name} batch: started before it was ready")
        batches.started += 1
        self._progress._where = self._at_batch_started

    def batch_processed(self, samples: int, dataloader: int = 0) -> None:
        """The batch's step is done: ``samples`` samples from dataloader number ``dataloader``."""
        batches = self._batches
        if batches.processed == batches.started:
            raise EventOrderError(f"{self.name} batch: processed before it was started")
        self._count_samples(samples, dataloader)
        batches.processed += 1
        self._progress._where = self._at_batch_processed

    def batch_completed(self) -> None:
        """The batch's end hooks are done."""
        batches = self._batches
        if batches.completed == batches.processed:
            raise EventOrderError(f"{self.name} batch: completed before it was processed")
        batches.completed += 1
        self._progress._where = self._at_batch_completed

    def batch_begin(self) -> None:
        """``batch_ready`` and ``batch_started`` in one call, for a framework with one event between them."""
        self.batch_ready()
        self.batch_started()

    def batch_end(self, samples: int, dataloader: int = 0) -> None:
        """``batch_processed`` and ``batch_completed`` in one call, for a framework with one event between them."""
        batches = self._batches
        if batches.completed != batches.processed:
            raise EventOrderError(f"{self.name} batch: processed again before it was completed")
        self.batch_processed(samples, dataloader)
        self.batch_completed()

    def batch_next(self) -> None:
        """``batch_completed`` for a processed batch in flight, if any, then ``batch_ready``: for a framework
        whose previous batch's end hooks are over when the next batch is fetched."""
        batches = self._batches
        if batches.ready != batches.completed and batches.ready == batches.processed:
            self.batch_completed()
        self.batch_ready()

    def batch_processed_of(self, batch: object, dataloader: int = 0) -> None:
        """``batch_processed`` with the samples of ``batch`` (:func:`samples_in`)."""
        self.batch_processed(samples_in(batch), dataloader)

    def batch_end_of(self, batch: object, dataloader: int = 0) -> None:
        """``batch_end`` with the samples of ``batch`` (:func:`samples_in`)."""
        self.batch_end(samples_in(batch), dataloader)

    def batch_turn(self, batch: object, dataloader: int = 0) -> None:
        """``batch_end_of(batch, dataloader)`` for the batch in flight, then ``batch_begin`` for the next: for a
        loop that learns a batch's step is over when it fetches the next batch."""
        batches = self._batches
        if batches.processed != batches.completed or batches.processed == batches.started:
            raise EventOrderError(f"{self.name} batch: ended while none was started and not processed")
        self.batch_end(samples_in(batch), dataloader)
        self.batch_begin()

    def batch_turner(self, dataloader: int = 0) -> Callable[[object], None]:
        """``batch_turn(batch, dataloader)`` as a function of the batch alone. A negative ``dataloader`` is
        refused here; the dataloader's counts exist from here on, whether or not a batch is turned."""
        if dataloader < 0:
            raise ValueError(f"{self.name} batch: dataloader must be >= 0, got {dataloader}")
        self._dataloader(dataloader)
        return partial(self.batch_turn, dataloader=dataloader)

    def cancel_batch(self) -> None:
        """Undo a fetched batch that will not be processed (e.g. a start hook asked to stop)."""
        batches = self._batches
        if batches.ready == batches.completed:
            raise EventOrderError(f"{self.name} batch: no batch in flight to cancel")
        if batches.processed != batches.completed:
            raise EventOrderError(f"{self.name} batch: cannot cancel a processed batch")
        batches.set_all(batches.completed)
        self._progress._where = self._at[Event.BATCH, CANCELLED]

    def count_tokens(self, tokens: int, non_padding: int) -> None:
        """The batch being processed held ``tokens`` tokens, ``non_padding`` of them not padding."""
        if not 0 <= non_padding <= tokens:
            raise ValueError(f"{self.name} batch: expected 0 <= non_padding <= tokens, got {non_padding}, {tokens}")
        self._tokens.total += tokens
        self._non_padding_tokens.total += non_padding

    # internals ----------------------------------------------------------------
    def _dataloader(self, index: int) -> DataloaderTallies:
        """The counts of dataloader number ``index``, made (with any before it) when first asked for."""
        loaders = self._dataloaders
        while len(loaders) <= index:
            loaders.append(DataloaderTallies())
        return loaders[index]

    def _count_samples(self, samples: int, dataloader: int) -> None:
        """Count a batch of ``samples`` samples in dataloader ``dataloader``'s tallies and the stage's samples."""
        if samples < 0 or dataloader < 0:
            raise ValueError(f"{self.name} batch: samples and dataloader must be >= 0, got {samples}, {dataloader}")
        loaders = self._dataloaders
        tallies = loaders[dataloader] if dataloader < len(loaders) else self._dataloader(dataloader)
        tallies.batches.total += 1
        tallies.samples.total += samples
        self._samples.total += samples

    def _tallies(self) -> list[Tally]:
        """Every tally of the stage, for scope resets."""
        return [tally for kind in self._tally_kinds() for tally in kind]

    def _tally_kinds(self) -> list[list[Tally]]:
        """The tallies of the stage by kind; a kind grows only at its end (a new dataloader or optimizer)."""
        per_loader = [tally for loader in self._dataloaders for tally in (loader.batches, loader.samples)]
        return [[self._samples, self._tokens, self._non_padding_tokens], per_loader]

    def _begin_run_scope(self) -> None:
        """A run begins: its scope starts now. An epoch left open (a run cut short inside it and saved)
        is re-entered by the new run, so its epoch scope is kept."""
        epochs = self._epochs
        keep_epoch = epochs.ready != epochs.completed
        epochs.run_base = epochs.completed
        self._batches.run_base = self._batches.completed
        if not keep_epoch:
            self._batches.epoch_base = self._batches.completed
        for tally in self._tallies():
            tally.run_base = tally.total
            if not keep_epoch:
                tally.epoch_base = tally.total
        self._seconds.run_base = self._seconds.epoch_base = self._seconds.total  # epoch seconds never above run


class TrainStageProgress(StageProgress):
    """The train stage: a stage that also counts optimizer and scheduler steps."""

    __slots__ = ("_optimizer_steps", "_optimizer_steps_skipped", "_scheduler_tally", "_schedulers", "_stepped_at")

    def __init__(self, progress: Progress) -> None:
        super().__init__(Stage.TRAIN, progress)
        self._optimizer_steps: list[Tally] = []
        self._optimizer_steps_skipped: list[Tally] = []
        self._scheduler_tally = Tally()
        self._schedulers: list[list[Any]] = []  # [a scheduler's weakref, its last_epoch read]: count_scheduler_steps
        self._stepped_at = 0  # lifetime batches started when the last optimizer step was taken

    def optimizer_step(self, optimizer: int = 0) -> None:
        """Optimizer number ``optimizer`` took a step."""
        if optimizer < 0:
            raise ValueError(f"optimizer index must be >= 0, got {optimizer}")
        try:
            tally = self._optimizer_steps[optimizer]
        except IndexError:
            tally = self._add_optimizers(optimizer)
        tally.total += 1
        self._stepped_at = self._batches.started
        heartbeat = self._progress._heartbeat  # rank 0 beside its checkpoints (tracker_core/_heartbeat.py)
        if heartbeat is not None:
            heartbeat.tick()

    def optimizer_step_skipped(self, optimizer: int = 0) -> None:
        """Optimizer number ``optimizer`` skipped a step (e.g. AMP found inf/nan gradients)."""
        if optimizer < 0:
            raise ValueError(f"optimizer index must be >= 0, got {optimizer}")
        self._add_optimizers(optimizer)
        self._optimizer_steps_skipped[optimizer].total += 1
        self._stepped_at = self._batches.started

    def scheduler_step(self) -> None:
        """A learning-rate scheduler took a step."""
        self._scheduler_tally.total += 1

    @property
    def _scheduler_steps(self) -> Tally:
        """The scheduler steps, with what the counted schedulers stepped until now."""
        self._read_schedulers()
        return self._scheduler_tally

    def _read_schedulers(self) -> None:
        """Count what each counted scheduler's ``last_epoch`` grew since it was last read."""
        tally = self._scheduler_tally
        for counted in self._schedulers:
            scheduler = counted[0]()
            now = counted[1] if scheduler is None else scheduler.last_epoch  # dropped: counts nothing more
            tally.total += max(0, now - counted[1])  # went back (its state loaded while counted): on from there
            counted[1] = now

    @property
    def stepped_in_batch(self) -> bool:
        """An optimizer step (taken or skipped) was counted while the batch in flight was started; False
        with no batch in flight (an adapter asks when a loop left a batch: was it trained?)."""
        batches = self._batches
        return batches.ready != batches.completed and self._stepped_at == batches.started

    @property
    def _accumulating_batches(self) -> int:
        """Batches processed since the last optimizer step (taken or skipped)."""
        return max(0, self._batches.processed - self._stepped_at)

    @_accumulating_batches.setter
    def _accumulating_batches(self, batches: int) -> None:
        """Set by a load, after the batch counts: the last step was taken ``batches`` processed batches ago."""
        self._stepped_at = self._batches.processed - batches

    def _add_optimizers(self, index: int) -> Tally:
        while len(self._optimizer_steps) <= index:
            self._optimizer_steps.append(Tally())
            self._optimizer_steps_skipped.append(Tally())
        return self._optimizer_steps[index]

    def _tally_kinds(self) -> list[list[Tally]]:
        return [
            *super()._tally_kinds(),
            [*self._optimizer_steps],
            [*self._optimizer_steps_skipped],
            [self._scheduler_steps],
        ]
