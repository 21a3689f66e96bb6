"""The trainer-level progress: runs, the four stages, and where the last event happened."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from tracker_core.counting import _clock
from tracker_core.counting._counts import Phased, Tally
from tracker_core.counting._ledger import RunLedger
from tracker_core.counting._stage import StageProgress, TrainStageProgress
from tracker_core.counting._view import ProgressView
from tracker_core.state._ledger import COMPLETED, CRASHED, INTERRUPTED, STOPPED_EARLY
from tracker_core.state._schema import MAX_ANOMALIES, MAX_ANOMALY_CHARS, Parsed, apply, dump, parse
from tracker_core.vocabulary import CANCELLED, Event, Phase, RunKind, Stage

if TYPE_CHECKING:
    from tracker_core._heartbeat import Heartbeat

_STAGE_NAMES = frozenset(Stage)
_RUN_KINDS = frozenset(RunKind)
_RUN_AT = {phase: ("", Event.RUN.value, phase.value) for phase in Phase}  # ``where`` of each run phase


class Progress:
    """How far a training program has got, owned and advanced by one loop or adapter; consumers read :attr:`view`.
    Counts live in three scopes: this epoch, this run (one fit/validate/test/predict call) and the model's lifetime."""

    __slots__ = (
        "_anomalies",
        "_anomaly_warned",
        "_checkpoint_restore_seconds",
        "_checkpoint_save_seconds",
        "_fast_forward_seconds",
        "_heartbeat",
        "_ledger",
        "_resume_mapping",
        "_resuming_run",
        "_run_kind",
        "_runs",
        "_timed",
        "_timed_since",
        "_where",
        "predict",
        "test",
        "train",
        "validate",
        "view",
    )

    def __init__(self) -> None:
        self._runs = Phased("run")
        self._run_kind = ""
        self._where: tuple[str, str, str] | None = None
        self._resuming_run = False
        self._resume_mapping: dict[str, Any] | None = None  # set by Tracker.load_state_dict (docs/distributed.md)
        self._anomalies: list[str] = []
        self._anomaly_warned = False  # an adapter's anomaly warned already
        self._timed: list[StageProgress] = []  # stages with an open epoch, innermost last: its clock runs
        self._timed_since = 0  # the clock (microseconds) when the innermost stage's time was last counted
        self._checkpoint_save_seconds = Tally()  # microseconds, as every time tally
        self._checkpoint_restore_seconds = Tally()
        self._fast_forward_seconds = Tally()
        self._ledger = RunLedger()  # one entry per run (docs/schema.md, ``ledger``)
        self._heartbeat: Heartbeat | None = None  # rank 0's, beside the checkpoints (keep_heartbeat)
        self.train = TrainStageProgress(self)
        self.validate = StageProgress(Stage.VALIDATE, self)
        self.test = StageProgress(Stage.TEST, self)
        self.predict = StageProgress(Stage.PREDICT, self)
        self.view = ProgressView(self)

    def stage(self, name: str) -> StageProgress:
        """The stage called ``name`` (train, validate, test or predict)."""
        if name not in _STAGE_NAMES:
            raise KeyError(f"unknown stage {name!r}; expected {', '.join(Stage)}")
        stage: StageProgress = getattr(self, name)
        return stage

    def _stages(self) -> tuple[StageProgress, ...]:
        return (self.train, self.validate, self.test, self.predict)

    # runs -------------------------------------------------------------------
    def run_ready(self, kind: str) -> None:
        """A ``fit``/``validate``/``test``/``predict`` call begins; re-entering a restored run counts nothing."""
        if kind not in _RUN_KINDS:
            raise ValueError(f"unknown run kind {kind!r}; expected one of {', '.join(RunKind)}")
        kind = str(kind)
        if self._resuming_run:
            if kind == self._run_kind:
                self._flush_time()
                self._ledger.resume(kind, self.train)
                return
            self._close_restored_run()
        self._stop_clocks()
        self._runs.mark_ready()
        self._run_kind = kind
        self._begin_run_scopes()
        self._where = _RUN_AT[Phase.READY]
        self._ledger.begin(kind, self.train)

    def run_started(self) -> None:
        """The run's start hooks are done."""
        if self._resuming_run:
            self._resuming_run = False
            for stage in self._stages():  # an epoch it left open: Lightning goes on without epoch_ready
                if stage._epochs.ready != stage._epochs.completed and stage not in self._timed:
                    self._enter_clock(stage)
            return
        self._runs.mark_started()
        self._where = _RUN_AT[Phase.STARTED]

    def run_processed(self) -> None:
        """The run's loop has finished."""
        self._resuming_run = False
        self._runs.mark_processed()
        self._where = _RUN_AT[Phase.PROCESSED]

    def run_completed(self) -> None:
        """The run's end hooks are done."""
        self.train._read_schedulers()  # now: held weakly, the schedulers may be dropped after the run
        self._runs.mark_completed()
        self._stop_clocks()
        self._where = _RUN_AT[Phase.COMPLETED]
        self._ledger.close(COMPLETED, self.train)
        self._beat()

    def note_run_end(self, ended: str) -> None:
        """For the run ledger, the current run ends otherwise than completed: ``"stopped_early"`` (it still completes),
        ``"interrupted"`` (KeyboardInterrupt) or ``"crashed"``; its counts are not touched. Nothing when no run is
        open or the open one was loaded and not yet resumed (the resume settles it)."""
        if ended not in (STOPPED_EARLY, INTERRUPTED, CRASHED):
            raise ValueError(f"unknown run ending {ended!r}; expected stopped_early, interrupted or crashed")
        self.train._read_schedulers()  # now: held weakly, the schedulers may be dropped after the run
        ledger = self._ledger
        if ledger.open_entry is None or ledger.restored_open:
            return
        if ended == STOPPED_EARLY:
            ledger.stopping_early = True
            return
        self._flush_time()
        ledger.close(ended, self.train)
        self._beat()

    def _beat(self) -> None:
        """A run ended: the heartbeat says so now (a resume from an older checkpoint learns how it ended)."""
        if self._heartbeat is not None:
            self._heartbeat.beat()

    def _close_restored_run(self) -> None:
        """End a restored run that will not be resumed; its unfinished epochs do not count."""
        self._resuming_run = False
        self._runs.set_all(self._runs.ready)
        for stage in self._stages():
            stage._resuming_epoch = False
            stage._epochs.set_all(stage._epochs.processed)

    # time (read at epoch and run boundaries, checkpoints and loads; never per batch) -----------
    def _enter_clock(self, stage: StageProgress) -> None:
        """An epoch of ``stage`` begins: its clock runs, pausing the stage whose epoch it is nested in
        (Lightning validates inside a train epoch)."""
        self._leave_clock(stage)  # its previous epoch, if any, never completed
        self._timed.append(stage)

    def _leave_clock(self, stage: StageProgress) -> None:
        """An epoch of ``stage`` completed: its clock stops; the stage it was nested in runs on."""
        self._flush_time()
        if stage in self._timed:
            self._timed.remove(stage)

    def _flush_time(self) -> None:
        """Count the running clock's time so far (before a dump or a view reads the seconds)."""
        now = _clock.now_us()
        if self._timed:
            self._timed[-1]._seconds.total += now - self._timed_since
        self._timed_since = now

    def _stop_clocks(self) -> None:
        """No epoch's clock runs: a run ends or begins, or a load replaces the times."""
        self._flush_time()
        self._timed.clear()

    def _begin_run_scopes(self) -> None:
        for stage in self._stages():
            stage._begin_run_scope()
        for tally in (self._checkpoint_save_seconds, self._checkpoint_restore_seconds, self._fast_forward_seconds):
            tally.run_base = tally.epoch_base = tally.total

    def _count_since(self, tally: Tally, began: int) -> None:
        """Count in ``tally`` the microseconds since ``began`` (checkpoint saves and restores)."""
        tally.total += max(0, _clock.now_us() - began)

    def _count_fast_forward(self, seconds: float) -> None:
        """A resume read already-trained batches again for ``seconds``."""
        self._fast_forward_seconds.total += max(0, round(seconds * 1_000_000))

    # anomalies ---------------------------------------------------------------
    def note_anomaly(self, message: str, framework: str = "") -> None:
        """Record what the counts could not follow, e.g. "validation cut by an exception at batch 3" (the last 100
        kept, each cut to 500 characters). An adapter names its ``framework``: its first anomaly also warns."""
        if not isinstance(message, str):
            raise TypeError(f"an anomaly is a str, got {type(message).__name__}")
        if len(message) > MAX_ANOMALY_CHARS:
            message = message[: MAX_ANOMALY_CHARS - 3] + "..."
        self._anomalies.append(message)
        del self._anomalies[:-MAX_ANOMALIES]
        if framework and not self._anomaly_warned:
            self._anomaly_warned = True
            warnings.warn(
                f"tracker-core ({framework}): {message}; recorded in view.anomalies (further anomalies are "
                "recorded without a warning)",
                RuntimeWarning,
                stacklevel=3,
            )

    # state --------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Plain data (ints, bools, str, lists, dicts) with a schema version; see docs/schema.md."""
        return dump(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume exactly from ``state``: validate all of it (a :class:`ProgressStateError` naming the key
        changes nothing), then replace the live counts, settling in-flight events as docs/design.md says."""
        self._load_parsed(parse(state))

    def load_lifetime(self, state: dict[str, Any]) -> None:
        """Carry only the lifetime counts of ``state`` into a new run (e.g. fine-tuning saved weights)."""
        self._load_parsed(parse(state))
        self._close_restored_run()
        self._begin_run_scopes()
        self._where = None

    def _load_parsed(self, parsed: Parsed) -> None:
        """Write a state that ``parse`` accepted and settle its in-flight events; cannot fail. No clock runs until
        the next epoch begins: the time the saving process was gone is not counted."""
        self._stop_clocks()
        self.train._schedulers = []  # a scheduler restored from here on would read as steps
        apply(self, parsed)
        self._settle_in_flight()
        self._resume_mapping = None

    def _settle_in_flight(self) -> None:
        """Settle each in-flight event and rewrite ``where`` to match (see load_state_dict)."""
        where = self._where
        named = None if where is None else self._counter(where[0], where[1])
        reached = 0 if where is None or where[2] == CANCELLED else getattr(named, where[2])
        for stage in self._stages():
            _settle_stage(stage)
        runs = self._runs
        if runs.processed != runs.completed:
            runs.set_all(runs.processed)
        self._resuming_run = runs.ready != runs.completed
        if self._resuming_run:
            runs.started = runs.ready
        if where is not None and named is not None:
            if named.ready != named.completed:
                phase = Phase.STARTED.value
            elif reached and named.completed >= reached:
                phase = Phase.COMPLETED.value
            else:
                phase = CANCELLED
            self._where = (where[0], where[1], phase)

    def _counter(self, stage: str, event: str) -> Phased:
        """The counter of ``event`` (of ``stage`` unless a run event)."""
        if event == Event.RUN:
            return self._runs
        return self.stage(stage)._epochs if event == Event.EPOCH else self.stage(stage)._batches


def _settle_stage(stage: StageProgress) -> None:
    batches = stage._batches
    batches.set_all(batches.processed)
    epochs = stage._epochs
    stage._resuming_epoch = False
    if epochs.processed != epochs.completed:
        epochs.set_all(epochs.processed)
    elif epochs.ready != epochs.completed:
        if stage.name == Stage.TRAIN:
            epochs.started = epochs.ready
            stage._resuming_epoch = True
        else:  # an unfinished evaluation epoch is dropped: it runs again from its first batch
            epochs.set_all(epochs.completed)
            batches.set_all(batches.epoch_base)
            for tally in stage._tallies():
                tally.total = tally.epoch_base
