"""Read-only views of a Progress for consumers: callbacks, loggers, progress bars."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

from tracker_core.counting._counts import PhaseCounts, ScopeCounts, Tally

if TYPE_CHECKING:
    from tracker_core.counting._progress import Progress
    from tracker_core.counting._stage import StageProgress, TrainStageProgress


class EpochCounts(NamedTuple):
    """Epoch phase counts in the run and lifetime scopes (an epoch has no epoch scope)."""

    run: PhaseCounts
    lifetime: PhaseCounts


class BatchCounts(NamedTuple):
    """Batch phase counts in each scope."""

    epoch: PhaseCounts
    run: PhaseCounts
    lifetime: PhaseCounts


class DataloaderCounts(NamedTuple):
    """Batches and samples processed from one dataloader, in each scope."""

    batches: ScopeCounts
    samples: ScopeCounts


class ScopeSeconds(NamedTuple):
    """Wall-clock seconds in each scope: this epoch, this run, and the lifetime of the model."""

    epoch: float
    run: float
    lifetime: float


class ScopeRates(NamedTuple):
    """A count per wall-clock second in each scope; None where no time was counted."""

    epoch: float | None
    run: float | None
    lifetime: float | None


class RunSeconds(NamedTuple):
    """Wall-clock seconds in this run and over the lifetime of the model."""

    run: float
    lifetime: float


class OverheadSeconds(NamedTuple):
    """Seconds spent outside the stages (docs/schema.md, the root ``microseconds``)."""

    checkpoint_save: RunSeconds
    checkpoint_restore: RunSeconds
    fast_forward: RunSeconds


class RunCounts(NamedTuple):
    """The kind of the current or last run and the lifetime phase counts of runs."""

    kind: str
    counts: PhaseCounts


class Where(NamedTuple):
    """The last event phase marked: ``stage`` is "" for run events."""

    stage: str
    event: str
    phase: str


class _ReadOnly:
    """Refuses to set or delete attributes; unpickled (pickle's slot state) past that guard."""

    __slots__ = ()

    def __setattr__(self, name: str, value: object = None) -> NoReturn:
        raise AttributeError(
            f"cannot set or delete {name!r}: {type(self).__name__} is read-only; "
            "progress changes only through the owning tracker"
        )

    __delattr__ = __setattr__

    def __setstate__(self, state: tuple[None, dict[str, Any]]) -> None:
        for name, value in state[1].items():
            object.__setattr__(self, name, value)


def _seconds(tally: Tally) -> ScopeSeconds:
    return ScopeSeconds(*(microseconds / 1e6 for microseconds in tally.scopes()))


def _rates(counts: ScopeCounts, seconds: ScopeSeconds) -> ScopeRates:
    return ScopeRates(*(n / s if s > 0 else None for n, s in zip(counts, seconds, strict=True)))


def _sum(counts: Iterable[ScopeCounts]) -> ScopeCounts:
    """``counts`` added up scope by scope (zeros when there are none)."""
    return ScopeCounts(*map(sum, zip(ScopeCounts(0, 0, 0), *counts, strict=True)))


class StageView(_ReadOnly):
    """Read-only counts of one stage."""

    __slots__ = ("_stage",)
    _stage: StageProgress

    def __init__(self, stage: StageProgress) -> None:
        object.__setattr__(self, "_stage", stage)

    @property
    def name(self) -> str:
        """The stage: ``"train"``, ``"validate"``, ``"test"`` or ``"predict"``."""
        return self._stage.name

    @property
    def epochs(self) -> EpochCounts:
        """The stage's epochs per phase, in run and lifetime scope."""
        e = self._stage._epochs
        return EpochCounts(e.since(e.run_base), e.lifetime())

    @property
    def batches(self) -> BatchCounts:
        """The stage's batches per phase, in epoch, run and lifetime scope."""
        b = self._stage._batches
        return BatchCounts(b.since(b.epoch_base), b.since(b.run_base), b.lifetime())

    @property
    def samples(self) -> ScopeCounts:
        """Samples of the processed batches, in epoch, run and lifetime scope."""
        return self._stage._samples.scopes()

    @property
    def tokens(self) -> ScopeCounts:
        """Tokens of the processed batches (docs/schema.md, ``tokens``), in epoch, run and lifetime scope."""
        return self._stage._tokens.scopes()

    @property
    def non_padding_tokens(self) -> ScopeCounts:
        """Tokens of the processed batches that are not padding (``attention_mask``'s sum), in each scope."""
        return self._stage._non_padding_tokens.scopes()

    @property
    def seconds(self) -> ScopeSeconds:
        """Wall-clock seconds inside the stage's epochs, per scope (docs/schema.md, ``microseconds``)."""
        self._stage._progress._flush_time()
        return _seconds(self._stage._seconds)

    @property
    def samples_per_second(self) -> ScopeRates:
        """Samples per wall-clock second of the stage (``samples / seconds``) in each scope."""
        return _rates(self.samples, self.seconds)

    @property
    def tokens_per_second(self) -> ScopeRates:
        """Tokens per wall-clock second of the stage (``tokens / seconds``) in each scope."""
        return _rates(self.tokens, self.seconds)

    @property
    def dataloaders(self) -> tuple[DataloaderCounts, ...]:
        """Per dataloader (index = the framework's dataloader index): its batches and samples."""
        return tuple(DataloaderCounts(d.batches.scopes(), d.samples.scopes()) for d in self._stage._dataloaders)

    @property
    def epoch_index(self) -> int:
        """Epochs completed in this run: the 0-based index of the current epoch."""
        e = self._stage._epochs
        return e.completed - e.run_base

    @property
    def batch_index(self) -> int:
        """0-based index in its epoch of the last batch fetched; -1 before the first."""
        b = self._stage._batches
        return b.ready - b.epoch_base - 1

    @property
    def is_mid_epoch(self) -> bool:
        """An epoch has begun, processed at least one batch, and not finished its batches."""
        e, b = self._stage._epochs, self._stage._batches
        return e.started != e.processed and b.processed != b.epoch_base


class TrainStageView(StageView):
    """Read-only counts of the train stage, with optimizer and scheduler steps."""

    __slots__ = ()
    _stage: TrainStageProgress

    @property
    def optimizer_steps(self) -> ScopeCounts:
        """Steps taken by all optimizers together."""
        return _sum(self.optimizer_steps_by_optimizer)

    @property
    def optimizer_steps_by_optimizer(self) -> tuple[ScopeCounts, ...]:
        """Steps taken, per optimizer (index = the order the optimizers were registered in)."""
        return tuple(t.scopes() for t in self._stage._optimizer_steps)

    @property
    def optimizer_steps_skipped(self) -> ScopeCounts:
        """Steps skipped by all optimizers together (e.g. AMP overflow), not in optimizer_steps."""
        return _sum(self.optimizer_steps_skipped_by_optimizer)

    @property
    def optimizer_steps_skipped_by_optimizer(self) -> tuple[ScopeCounts, ...]:
        """Steps skipped, per optimizer."""
        return tuple(t.scopes() for t in self._stage._optimizer_steps_skipped)

    @property
    def scheduler_steps(self) -> ScopeCounts:
        """Steps of the learning-rate schedulers the adapter counts (all schedulers together)."""
        return self._stage._scheduler_steps.scopes()

    @property
    def accumulating_batches(self) -> int:
        """Batches processed since the last optimizer step: gradients not yet applied."""
        return self._stage._accumulating_batches


class ProgressView(_ReadOnly):
    """Read-only view of a whole Progress; what ``tracker_core.get_progress`` returns."""

    __slots__ = ("_progress", "predict", "test", "train", "validate")

    _progress: Progress
    train: TrainStageView
    validate: StageView
    test: StageView
    predict: StageView

    def __init__(self, progress: Progress) -> None:
        object.__setattr__(self, "_progress", progress)
        object.__setattr__(self, "train", TrainStageView(progress.train))
        for name in ("validate", "test", "predict"):
            object.__setattr__(self, name, StageView(progress.stage(name)))

    def stage(self, name: str) -> StageView:
        """The view of stage ``name`` (train, validate, test or predict)."""
        view: StageView = getattr(self, self._progress.stage(name).name)
        return view

    @property
    def run(self) -> RunCounts:
        """The kind of the current or last run (``fit``, ``validate``, ...) and runs per phase over the lifetime."""
        return RunCounts(self._progress._run_kind, self._progress._runs.lifetime())

    @property
    def where(self) -> Where | None:
        """The last event phase marked (what a checkpoint taken now records); None before any."""
        where = self._progress._where
        return None if where is None else Where(*where)

    @property
    def resume_mapping(self) -> dict[str, Any] | None:
        """How the last load mapped a checkpoint saved at another world size (a copy; see
        docs/distributed.md); None when nothing was mapped."""
        mapping = self._progress._resume_mapping
        return None if mapping is None else copy.deepcopy(mapping)

    @property
    def anomalies(self) -> tuple[str, ...]:
        """What happened that the counts could not follow (``Progress.note_anomaly``), oldest first."""
        return tuple(self._progress._anomalies)

    @property
    def overhead_seconds(self) -> OverheadSeconds:
        """Seconds of the tracker's checkpoint saves and restores and of resumes' fast-forwards, per scope."""
        p = self._progress
        tallies = (p._checkpoint_save_seconds, p._checkpoint_restore_seconds, p._fast_forward_seconds)
        return OverheadSeconds(*(RunSeconds(*_seconds(tally)[1:]) for tally in tallies))

    @property
    def global_step(self) -> int:
        """Optimizer steps taken in this run by all optimizers (Lightning's ``global_step``)."""
        return self.train.optimizer_steps.run

    @property
    def epoch_index(self) -> int:
        """Train epochs completed in this run: the 0-based index of the current train epoch."""
        return self.train.epoch_index

    @property
    def batch_index(self) -> int:
        """0-based index of the last train batch fetched in its epoch; -1 before the first."""
        return self.train.batch_index

    @property
    def is_mid_epoch(self) -> bool:
        """A train epoch has begun, processed at least one batch, and not finished its batches."""
        return self.train.is_mid_epoch

    @property
    def is_mid_accumulation(self) -> bool:
        """Train batches were processed whose gradients no optimizer step has applied yet."""
        return self.train.accumulating_batches > 0

    @property
    def total_batches(self) -> ScopeCounts:
        """Batches processed by all four stages together."""
        return _sum(ScopeCounts(*(phases.processed for phases in s.batches)) for s in self._stages())

    @property
    def total_samples(self) -> ScopeCounts:
        """Samples processed by all four stages together."""
        return _sum(s.samples for s in self._stages())

    def _stages(self) -> tuple[StageView, ...]:
        return (self.train, self.validate, self.test, self.predict)

    def state_dict(self) -> dict[str, Any]:
        """The same plain data as the owner's ``state_dict()``."""
        return self._progress.state_dict()
