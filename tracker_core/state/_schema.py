"""The saved form of a Progress: hand-written dump, full validation, migration, apply.

Validation happens entirely in :func:`parse`, which reads the state without touching
any Progress; :func:`apply` then writes it and cannot fail, so a bad state changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from tracker_core._errors import ProgressStateError
from tracker_core.counting._counts import PhaseCounts, ScopeCounts, _Phased, _Tally
from tracker_core.counting._stage import StageProgress, TrainStageProgress, _DataloaderTallies
from tracker_core.state._readers import join_key, read_int, read_list, read_mapping, type_name
from tracker_core.vocabulary import CANCELLED, Event, Phase, RunKind, Scope, Stage

if TYPE_CHECKING:
    from tracker_core.counting._progress import Progress

SCHEMA_VERSION = 2
MAX_ANOMALIES = 100  # the most recent ones are kept
MAX_ANOMALY_CHARS = 500  # a longer message is cut to this length


def _v1_to_v2(state: dict[str, Any]) -> dict[str, Any]:
    """Version 2 added the list of anomalies; a version-1 state recorded none."""
    return {**state, "schema_version": 2, "anomalies": []}


# Each entry turns a state of schema version ``v`` into one of version ``v + 1``.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2}

_ROOT_KEYS = ("schema_version", "where", "run", "stages", "anomalies")
_STAGE_KEYS = ("epochs", "batches", "samples", "dataloaders")
_TRAIN_KEYS = (
    *_STAGE_KEYS,
    "optimizer_steps",
    "optimizer_steps_skipped",
    "scheduler_steps",
    "accumulating_batches",
)
_WHERE_KEYS = ("stage", "event", "phase")
_PHASES = tuple(phase.value for phase in Phase)
_SCOPES = tuple(scope.value for scope in Scope)
_STAGES = tuple(stage.value for stage in Stage)


# dump -----------------------------------------------------------------------
def _phases(counter: _Phased, base: int) -> dict[str, int]:
    return {
        "ready": counter.ready - base,
        "started": counter.started - base,
        "processed": counter.processed - base,
        "completed": counter.completed - base,
    }


def _scopes(tally: _Tally) -> dict[str, int]:
    total = tally.total
    return {"epoch": total - tally.epoch_base, "run": total - tally.run_base, "lifetime": total}


def _dump_stage(stage: StageProgress) -> dict[str, Any]:
    epochs, batches = stage._epochs, stage._batches
    state: dict[str, Any] = {
        "epochs": {"run": _phases(epochs, epochs.run_base), "lifetime": _phases(epochs, 0)},
        "batches": {
            "epoch": _phases(batches, batches.epoch_base),
            "run": _phases(batches, batches.run_base),
            "lifetime": _phases(batches, 0),
        },
        "samples": _scopes(stage._samples),
        "dataloaders": [{"batches": _scopes(d.batches), "samples": _scopes(d.samples)} for d in stage._dataloaders],
    }
    if isinstance(stage, TrainStageProgress):
        state["optimizer_steps"] = [_scopes(t) for t in stage._optimizer_steps]
        state["optimizer_steps_skipped"] = [_scopes(t) for t in stage._optimizer_steps_skipped]
        state["scheduler_steps"] = _scopes(stage._scheduler_steps)
        state["accumulating_batches"] = stage._accumulating_batches
    return state


def dump_where(where: tuple[str, str, str] | None) -> dict[str, str]:
    """``where`` in state_dict layout: ``{}`` before the first event."""
    return {} if where is None else {"stage": where[0], "event": where[1], "phase": where[2]}


def dump(progress: Progress) -> dict[str, Any]:
    runs = progress._runs
    return {
        "schema_version": SCHEMA_VERSION,
        "where": dump_where(progress._where),
        "run": {"kind": progress._run_kind, **_phases(runs, 0)},
        "stages": {stage.name: _dump_stage(stage) for stage in progress._stages()},
        "anomalies": list(progress._anomalies),
    }


# parse ----------------------------------------------------------------------
class _ParsedDataloader(NamedTuple):
    batches: ScopeCounts
    samples: ScopeCounts


class _ParsedStage(NamedTuple):
    epochs_run: PhaseCounts
    epochs_lifetime: PhaseCounts
    batches_epoch: PhaseCounts
    batches_run: PhaseCounts
    batches_lifetime: PhaseCounts
    samples: ScopeCounts
    dataloaders: list[_ParsedDataloader]
    optimizer_steps: list[ScopeCounts]
    optimizer_steps_skipped: list[ScopeCounts]
    scheduler_steps: ScopeCounts
    accumulating_batches: int


class Parsed(NamedTuple):
    where: tuple[str, str, str] | None
    run_kind: str
    runs: PhaseCounts
    stages: dict[str, _ParsedStage]
    anomalies: list[str]


def _phase_counts(value: object, key: str) -> PhaseCounts:
    raw = read_mapping(value, key, required=_PHASES)
    counts = PhaseCounts(*(read_int(raw[name], join_key(key, name), minimum=0) for name in _PHASES))
    for before, after in zip(_PHASES, _PHASES[1:], strict=False):
        if getattr(counts, before) < getattr(counts, after):
            raise ProgressStateError(
                key,
                f"phases out of order: {before} {getattr(counts, before)} < {after} {getattr(counts, after)}",
            )
    if counts.ready - counts.completed > 1:
        raise ProgressStateError(key, f"{counts.ready - counts.completed} events in flight; at most 1 can be")
    return counts


def _scope_counts(value: object, key: str) -> ScopeCounts:
    raw = read_mapping(value, key, required=_SCOPES)
    counts = ScopeCounts(*(read_int(raw[name], join_key(key, name), minimum=0) for name in _SCOPES))
    if counts.epoch > counts.run:
        raise ProgressStateError(key, f"epoch scope {counts.epoch} above run scope {counts.run}")
    if counts.run > counts.lifetime:
        raise ProgressStateError(key, f"run scope {counts.run} above lifetime scope {counts.lifetime}")
    return counts


def _nested(inner: PhaseCounts, outer: PhaseCounts, key: str, inner_name: str, outer_name: str) -> None:
    """``inner`` must be ``outer`` minus one baseline, the same for every phase."""
    offset = outer.ready - inner.ready
    if offset < 0:
        raise ProgressStateError(key, f"{inner_name} scope above {outer_name} scope")
    if any(o - i != offset for o, i in zip(outer, inner)):
        raise ProgressStateError(key, f"{inner_name} and {outer_name} scopes differ by different amounts across phases")


def _parse_stage(value: object, key: str, name: str) -> _ParsedStage:
    raw = read_mapping(value, key, required=_TRAIN_KEYS if name == "train" else _STAGE_KEYS)
    epochs = read_mapping(raw["epochs"], f"{key}.epochs", required=(Scope.RUN, Scope.LIFETIME))
    epochs_run = _phase_counts(epochs["run"], f"{key}.epochs.run")
    epochs_lifetime = _phase_counts(epochs["lifetime"], f"{key}.epochs.lifetime")
    _nested(epochs_run, epochs_lifetime, f"{key}.epochs.run", "run", "lifetime")
    batches = read_mapping(raw["batches"], f"{key}.batches", required=_SCOPES)
    b_epoch = _phase_counts(batches["epoch"], f"{key}.batches.epoch")
    b_run = _phase_counts(batches["run"], f"{key}.batches.run")
    b_lifetime = _phase_counts(batches["lifetime"], f"{key}.batches.lifetime")
    _nested(b_epoch, b_run, f"{key}.batches.epoch", "epoch", "run")
    _nested(b_run, b_lifetime, f"{key}.batches.run", "run", "lifetime")
    if b_lifetime.in_flight and not epochs_lifetime.in_flight:
        raise ProgressStateError(f"{key}.batches.lifetime", "a batch is in flight outside an epoch")
    samples = _scope_counts(raw["samples"], f"{key}.samples")
    dataloaders = [
        _ParsedDataloader(
            _scope_counts(
                read_mapping(d, f"{key}.dataloaders.{i}", required=("batches", "samples"))["batches"],
                f"{key}.dataloaders.{i}.batches",
            ),
            _scope_counts(d["samples"], f"{key}.dataloaders.{i}.samples"),
        )
        for i, d in enumerate(read_list(raw["dataloaders"], f"{key}.dataloaders"))
    ]
    processed = ScopeCounts(b_epoch.processed, b_run.processed, b_lifetime.processed)
    _sums_match([d.batches for d in dataloaders], processed, f"{key}.dataloaders", "batches", "processed batches")
    _sums_match([d.samples for d in dataloaders], samples, f"{key}.dataloaders", "samples", "samples")
    steps: list[ScopeCounts] = []
    skipped: list[ScopeCounts] = []
    scheduler = ScopeCounts(0, 0, 0)
    accumulating = 0
    if name == "train":
        steps = [
            _scope_counts(s, f"{key}.optimizer_steps.{i}")
            for i, s in enumerate(read_list(raw["optimizer_steps"], f"{key}.optimizer_steps"))
        ]
        skipped = [
            _scope_counts(s, f"{key}.optimizer_steps_skipped.{i}")
            for i, s in enumerate(read_list(raw["optimizer_steps_skipped"], f"{key}.optimizer_steps_skipped"))
        ]
        if len(steps) != len(skipped):
            raise ProgressStateError(
                f"{key}.optimizer_steps_skipped",
                f"{len(skipped)} optimizers, but optimizer_steps has {len(steps)}",
            )
        scheduler = _scope_counts(raw["scheduler_steps"], f"{key}.scheduler_steps")
        accumulating = read_int(raw["accumulating_batches"], f"{key}.accumulating_batches", minimum=0)
        if accumulating > b_lifetime.processed:
            raise ProgressStateError(
                f"{key}.accumulating_batches",
                f"{accumulating} exceeds the {b_lifetime.processed} batches ever processed",
            )
    return _ParsedStage(
        epochs_run,
        epochs_lifetime,
        b_epoch,
        b_run,
        b_lifetime,
        samples,
        dataloaders,
        steps,
        skipped,
        scheduler,
        accumulating,
    )


def _sums_match(parts: list[ScopeCounts], whole: ScopeCounts, key: str, field: str, what: str) -> None:
    if not parts:
        if any(whole):
            raise ProgressStateError(key, f"no dataloaders, but {whole.lifetime} {what} in lifetime scope")
        return
    for scope in Scope:
        total = sum(getattr(p, scope) for p in parts)
        if total != getattr(whole, scope):
            raise ProgressStateError(
                key, f"{field} add up to {total} in {scope} scope, but the stage has {getattr(whole, scope)} {what}"
            )


def _parse_where(value: object) -> tuple[str, str, str] | None:
    if value == {}:
        return None
    raw = read_mapping(value, "where", required=_WHERE_KEYS)
    stage, event, phase = (raw[k] for k in _WHERE_KEYS)
    for name, got in zip(_WHERE_KEYS, (stage, event, phase)):
        if not isinstance(got, str):
            raise ProgressStateError(f"where.{name}", f"expected a str, got {type_name(got)}")
    if event == Event.RUN:
        if stage != "":
            raise ProgressStateError("where.stage", f"a run event has no stage, got {stage!r}")
    elif event in (Event.EPOCH, Event.BATCH):
        if stage not in _STAGES:
            raise ProgressStateError("where.stage", f"unknown stage {stage!r}")
    else:
        raise ProgressStateError("where.event", f"unknown event {event!r}; expected run, epoch or batch")
    if phase not in (*_PHASES, CANCELLED):
        raise ProgressStateError("where.phase", f"unknown phase {phase!r} for the {event} event")
    return (stage, event, phase)


def _check_where(where: tuple[str, str, str], runs: PhaseCounts, stages: dict[str, _ParsedStage]) -> None:
    """The counts of the event named by ``where`` must show that phase as the last one marked."""
    stage, event, phase = where
    if event == Event.RUN:
        counts = runs
    elif event == Event.EPOCH:
        counts = stages[stage].epochs_lifetime
    else:
        counts = stages[stage].batches_lifetime
    if phase == CANCELLED:
        expected_in_flight = 0
        reached = counts.completed
    else:
        expected_in_flight = 0 if phase == "completed" else 1
        reached = getattr(counts, phase)
    index = _PHASES.index(phase) if phase != CANCELLED else len(_PHASES) - 1
    expected = PhaseCounts(*(reached if i <= index else reached - expected_in_flight for i in range(4)))
    if counts != expected or (reached == 0 and phase != CANCELLED):
        raise ProgressStateError(
            "where", f"says {stage or 'run'} {event} {phase}, but the {event} counts are {tuple(counts)}"
        )


def _parse_anomalies(value: object) -> list[str]:
    anomalies = read_list(value, "anomalies")
    if len(anomalies) > MAX_ANOMALIES:
        raise ProgressStateError("anomalies", f"{len(anomalies)} anomalies; at most {MAX_ANOMALIES} are kept")
    for i, message in enumerate(anomalies):
        if not isinstance(message, str):
            raise ProgressStateError(f"anomalies.{i}", f"expected a str, got {type_name(message)}")
        if len(message) > MAX_ANOMALY_CHARS:
            raise ProgressStateError(
                f"anomalies.{i}", f"{len(message)} characters; an anomaly has at most {MAX_ANOMALY_CHARS}"
            )
    return list(anomalies)


def _migrate(state: dict[str, Any], version: int) -> dict[str, Any]:
    while version < SCHEMA_VERSION:
        step = MIGRATIONS.get(version)
        if step is None:
            raise ProgressStateError("schema_version", f"unknown schema version {version}")
        state = step(state)
        version += 1
    return state


def parse(state: object) -> Parsed:
    """Validate ``state`` completely; raise ProgressStateError naming the first bad key."""
    if not isinstance(state, dict):
        raise ProgressStateError("", f"expected a dict, got {type_name(state)}")
    if "schema_version" not in state:
        raise ProgressStateError("schema_version", "missing")
    version = state["schema_version"]
    if isinstance(version, bool) or not isinstance(version, int):
        raise ProgressStateError("schema_version", f"expected an int, got {type_name(version)}")
    if version > SCHEMA_VERSION:
        raise ProgressStateError(
            "schema_version",
            f"version {version} was written by a newer progress-tracker; this one reads up to {SCHEMA_VERSION}",
        )
    state = read_mapping(_migrate(state, version), "", required=_ROOT_KEYS)
    run = read_mapping(state["run"], "run", required=("kind", *_PHASES))
    kind = run["kind"]
    if kind not in ("", *RunKind):
        raise ProgressStateError("run.kind", f"unknown run kind {kind!r}")
    runs = _phase_counts({p: run[p] for p in _PHASES}, "run")
    raw_stages = read_mapping(state["stages"], "stages", required=_STAGES)
    stages = {name: _parse_stage(raw_stages[name], f"stages.{name}", name) for name in _STAGES}
    where = _parse_where(state["where"])
    if where is not None:
        _check_where(where, runs, stages)
    return Parsed(where, kind, runs, stages, _parse_anomalies(state["anomalies"]))


# apply ----------------------------------------------------------------------
def _set_phased(counter: _Phased, lifetime: PhaseCounts, run: PhaseCounts, epoch: PhaseCounts | None) -> None:
    counter.ready, counter.started, counter.processed, counter.completed = lifetime
    counter.run_base = lifetime.ready - run.ready
    counter.epoch_base = counter.run_base if epoch is None else lifetime.ready - epoch.ready


def _set_tally(tally: _Tally, counts: ScopeCounts) -> None:
    tally.total = counts.lifetime
    tally.run_base = counts.lifetime - counts.run
    tally.epoch_base = counts.lifetime - counts.epoch


def _tallies(counts: list[ScopeCounts]) -> list[_Tally]:
    tallies = [_Tally() for _ in counts]
    for tally, scoped in zip(tallies, counts):
        _set_tally(tally, scoped)
    return tallies


def apply(progress: Progress, parsed: Parsed) -> None:
    """Write a parsed state into ``progress``; cannot fail."""

    progress._where = parsed.where
    progress._run_kind = parsed.run_kind
    progress._anomalies = list(parsed.anomalies)
    progress._runs.ready, progress._runs.started, progress._runs.processed, progress._runs.completed = parsed.runs
    for stage in progress._stages():
        p = parsed.stages[stage.name]
        _set_phased(stage._epochs, p.epochs_lifetime, p.epochs_run, None)
        _set_phased(stage._batches, p.batches_lifetime, p.batches_run, p.batches_epoch)
        _set_tally(stage._samples, p.samples)
        stage._dataloaders = []
        for d in p.dataloaders:
            tallies = _DataloaderTallies()
            _set_tally(tallies.batches, d.batches)
            _set_tally(tallies.samples, d.samples)
            stage._dataloaders.append(tallies)
        if isinstance(stage, TrainStageProgress):
            stage._optimizer_steps = _tallies(p.optimizer_steps)
            stage._optimizer_steps_skipped = _tallies(p.optimizer_steps_skipped)
            _set_tally(stage._scheduler_steps, p.scheduler_steps)
            stage._stepped_at = p.batches_lifetime.processed - p.accumulating_batches
