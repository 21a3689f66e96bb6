"""The saved form of a Progress, declared once (``FORM``, docs/schema.md), with its version; :func:`dump`,
:func:`parse`, :func:`apply` and the flat layout of ``reduce_state`` (:func:`pack`, ...) are walks over ``FORM``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from tracker_core._errors import ProgressStateError
from tracker_core.counting._counts import PhaseCounts, Tally
from tracker_core.counting._stage import DataloaderTallies
from tracker_core.state._form import (
    PHASES,
    SCOPES,
    Count,
    Field,
    ListOf,
    Part,
    PhaseCount,
    Record,
    TallyCount,
    Value,
    phase_counts,
)
from tracker_core.state._ledger import LedgerPart
from tracker_core.state._readers import join_key, read_list, read_mapping, read_str, read_version, shown, type_name
from tracker_core.vocabulary import CANCELLED, Event, RunKind, Scope, Stage

if TYPE_CHECKING:
    from tracker_core.counting._progress import Progress

SCHEMA_VERSION = 5
MAX_ANOMALIES = 100  # the most recent ones are kept
MAX_ANOMALY_CHARS = 500  # a longer message is cut to this length
_OVERHEADS = ("checkpoint_save", "checkpoint_restore", "fast_forward")  # timed outside the stages
_STAGES = tuple(stage.value for stage in Stage)
_RUN_KINDS = ("", *(kind.value for kind in RunKind))  # "" before the first run
_WHERE_KEYS = ("stage", "event", "phase")
_WHERE_EVENTS = {Event.RUN.value: ("",), Event.EPOCH.value: _STAGES, Event.BATCH.value: _STAGES}


# values that are not counts -------------------------------------------------------------
def _dump_where(where: tuple[str, str, str] | None) -> dict[str, str]:
    """``where`` in state_dict layout: ``{}`` before the first event."""
    return {} if where is None else dict(zip(_WHERE_KEYS, where, strict=True))


def _parse_where(raw: object, key: str) -> tuple[str, str, str] | None:
    if raw == {}:
        return None
    fields = read_mapping(raw, key, required=_WHERE_KEYS)
    stage, event, phase = (read_str(fields[name], f"{key}.{name}") for name in _WHERE_KEYS)
    if event not in _WHERE_EVENTS:
        raise ProgressStateError(f"{key}.event", f"unknown event {shown(event)}; expected run, epoch or batch")
    if stage not in _WHERE_EVENTS[event]:
        problem = (
            f"a run event has no stage, got {shown(stage)}" if event == Event.RUN else f"unknown stage {shown(stage)}"
        )
        raise ProgressStateError(f"{key}.stage", problem)
    if phase not in (*PHASES, CANCELLED):
        raise ProgressStateError(f"{key}.phase", f"unknown phase {shown(phase)} for the {event} event")
    return (stage, event, phase)


def _parse_anomalies(raw: object, key: str) -> list[str]:
    anomalies = read_list(raw, key)
    if len(anomalies) > MAX_ANOMALIES:
        raise ProgressStateError(key, f"{len(anomalies)} anomalies; at most {MAX_ANOMALIES} are kept")
    for i, message in enumerate(anomalies):
        read_str(message, f"{key}.{i}")
        if len(message) > MAX_ANOMALY_CHARS:
            raise ProgressStateError(
                f"{key}.{i}", f"{len(message)} characters; an anomaly has at most {MAX_ANOMALY_CHARS}"
            )
    return list(anomalies)


class _Run(Part):
    """``run``: the current or last run's kind beside the lifetime phase counts of runs."""

    _counts = PhaseCount()

    def dump(self, live: Progress) -> dict[str, Any]:
        return {"kind": live._run_kind, **self._counts.dump(live._runs)}

    def parse(self, raw: object, key: str) -> tuple[str, PhaseCounts]:
        fields = read_mapping(raw, key, required=("kind", *PHASES))
        if fields["kind"] not in _RUN_KINDS:
            raise ProgressStateError(f"{key}.kind", f"unknown run kind {shown(fields['kind'])}")
        return str(fields["kind"]), phase_counts({phase: fields[phase] for phase in PHASES}, key)

    def store(self, owner: Any, attr: str, value: tuple[str, PhaseCounts]) -> None:
        owner._run_kind = value[0]
        self._counts.store(owner._runs, "", value[1])

    def pack(self, live: Progress, out: list[int]) -> None:
        self._counts.pack(live._runs, out)

    def unpack(self, live: Progress, take: Callable[[], int]) -> dict[str, Any]:
        return {"kind": live._run_kind, **self._counts.unpack(live._runs, take)}


# checks that span several fields ------------------------------------------------------------
def _sums_match(
    parts: Sequence[dict[str, int]], whole: dict[str, int], key: str, field: str, what: str, combined: bool = False
) -> None:
    """``parts`` add up to ``whole`` in each scope. With ``combined`` (steps read a batch of several dataloaders,
    ``count_combined_batch``) batches add up to at least ``whole`` and none is beyond it, in each scope and
    before the run; in the epoch scope, where a dataloader's counts restart with each pass
    (``count_combined_batch``'s ``passes``), none is beyond it."""
    if not parts:
        if any(whole.values()):
            raise ProgressStateError(key, f"no dataloaders, but {whole[Scope.LIFETIME]} {what} in lifetime scope")
        return
    for scope in SCOPES:
        total = sum(part[scope] for part in parts)
        at_least = combined and field == "batches"
        summed = not (combined and scope == Scope.EPOCH)  # else only "none beyond the stage" is checked
        if summed and (total < whole[scope] or (total != whole[scope] and not at_least)):
            raise ProgressStateError(
                key, f"{field} add up to {total} in {scope} scope, but the stage has {whole[scope]} {what}"
            )
        if combined and max(part[scope] for part in parts) > whole[scope]:
            raise ProgressStateError(
                key, f"a dataloader has more {field} in {scope} scope than the stage's {whole[scope]} {what}"
            )
    if combined:  # before this run too: a run rolled back on load must leave no dataloader beyond the stage
        earlier = whole[Scope.LIFETIME] - whole[Scope.RUN]
        if max(part[Scope.LIFETIME] - part[Scope.RUN] for part in parts) > earlier:
            raise ProgressStateError(
                key, f"a dataloader has more {field} before this run than the stage's {earlier} {what}"
            )


def _check_stage(stage: dict[str, Any], key: str) -> None:
    batches = stage["batches"]
    if batches[Scope.LIFETIME].in_flight and not stage["epochs"][Scope.LIFETIME].in_flight:
        raise ProgressStateError(f"{key}.batches.lifetime", "a batch is in flight outside an epoch")
    dataloaders = stage["dataloaders"]
    processed = {scope: batches[scope].processed for scope in SCOPES}
    batches_by_loader = [d["batches"] for d in dataloaders]
    combined = sum(b[Scope.LIFETIME] for b in batches_by_loader) > processed[Scope.LIFETIME]
    _sums_match(batches_by_loader, processed, f"{key}.dataloaders", "batches", "processed batches", combined)
    for scope in SCOPES:
        tokens, non_padding = stage["tokens"][scope], stage["non_padding_tokens"][scope]
        if non_padding > tokens:
            raise ProgressStateError(f"{key}.non_padding_tokens.{scope}", f"{non_padding} above the {tokens} tokens")
    samples_by_loader = [d["samples"] for d in dataloaders]
    _sums_match(samples_by_loader, stage["samples"], f"{key}.dataloaders", "samples", "samples", combined)


def _check_train_stage(stage: dict[str, Any], key: str) -> None:
    _check_stage(stage, key)
    steps, skipped = stage["optimizer_steps"], stage["optimizer_steps_skipped"]
    if len(steps) != len(skipped):
        raise ProgressStateError(
            f"{key}.optimizer_steps_skipped", f"{len(skipped)} optimizers, but optimizer_steps has {len(steps)}"
        )
    accumulating, processed = stage["accumulating_batches"], stage["batches"][Scope.LIFETIME].processed
    if accumulating > processed:
        raise ProgressStateError(
            f"{key}.accumulating_batches", f"{accumulating} exceeds the {processed} batches ever processed"
        )


def _check_where(state: dict[str, Any], key: str) -> None:
    """The counts of the event named by ``where`` must show that phase as the last one marked."""
    where = state["where"]
    if where is None:
        return
    stage, event, phase = where
    if event == Event.RUN:
        counts = state["run"][1]
    else:
        counts = state["stages"][stage]["epochs" if event == Event.EPOCH else "batches"][Scope.LIFETIME]
    if phase == CANCELLED:
        in_flight, reached, index = 0, counts.completed, len(PHASES) - 1
    else:
        in_flight, reached, index = int(phase != "completed"), getattr(counts, phase), PHASES.index(phase)
    expected = PhaseCounts(*(reached if i <= index else reached - in_flight for i in range(len(PHASES))))
    if counts != expected or (reached == 0 and phase != CANCELLED):
        raise ProgressStateError(
            "where", f"says {stage or 'run'} {event} {phase}, but the {event} counts are {tuple(counts)}"
        )


# the declaration -------------------------------------------------------------------------------
_STAGE_FIELDS = (
    Field("epochs", "_epochs", PhaseCount((Scope.RUN, Scope.LIFETIME))),
    Field("batches", "_batches", PhaseCount(tuple(Scope))),
    Field("samples", "_samples", TallyCount()),
    Field("tokens", "_tokens", TallyCount()),
    Field("non_padding_tokens", "_non_padding_tokens", TallyCount()),
    Field(
        "dataloaders",
        "_dataloaders",
        ListOf(
            Record(Field("batches", "batches", TallyCount()), Field("samples", "samples", TallyCount())),
            DataloaderTallies,
        ),
    ),
    Field("microseconds", "_seconds", TallyCount()),
)
_STAGE = Record(*_STAGE_FIELDS, check=_check_stage)
_TRAIN_STAGE = Record(
    *_STAGE_FIELDS,
    Field("optimizer_steps", "_optimizer_steps", ListOf(TallyCount(), Tally)),
    Field("optimizer_steps_skipped", "_optimizer_steps_skipped", ListOf(TallyCount(), Tally)),
    Field("scheduler_steps", "_scheduler_steps", TallyCount()),
    Field("accumulating_batches", "_accumulating_batches", Count()),
    check=_check_train_stage,
)

FORM = Record(
    # the one version parse() reads (checked there, first); the live progress holds none
    Field("schema_version", "", Value(lambda live: SCHEMA_VERSION, lambda raw, key: SCHEMA_VERSION)),
    Field("where", "_where", Value(_dump_where, _parse_where)),
    Field("run", "", _Run()),
    Field("stages", "", Record(*(Field(s, s, _TRAIN_STAGE if s == Stage.TRAIN else _STAGE) for s in _STAGES))),
    Field(
        "microseconds",
        "",
        Record(*(Field(name, f"_{name}_seconds", TallyCount((Scope.RUN, Scope.LIFETIME))) for name in _OVERHEADS)),
    ),
    Field("anomalies", "_anomalies", Value(list, _parse_anomalies)),
    Field("ledger", "", LedgerPart()),
    check=_check_where,
)
"""The saved form: ``Progress.state_dict()`` is ``FORM.dump(progress)``; see docs/schema.md."""


# walks -------------------------------------------------------------------------------------------
class Parsed(NamedTuple):
    """A state that :func:`parse` accepted: what :func:`apply` writes."""

    state: dict[str, Any]

    @property
    def train_epochs(self) -> PhaseCounts:
        """Lifetime phase counts of train epochs."""
        epochs: PhaseCounts = self.state["stages"][Stage.TRAIN]["epochs"][Scope.LIFETIME]
        return epochs

    @property
    def train_dataloaders(self) -> int:
        """How many train dataloaders have counts."""
        return len(self.state["stages"][Stage.TRAIN]["dataloaders"])


def dump(progress: Progress) -> dict[str, Any]:
    progress._flush_time()
    return FORM.dump(progress)


def parse(state: object) -> Parsed:
    """Validate ``state`` completely; raise ProgressStateError naming the first bad key."""
    if not isinstance(state, dict):
        raise ProgressStateError("", f"expected a dict, got {type_name(state)}")
    if "schema_version" not in state:
        raise ProgressStateError("schema_version", "missing")
    read_version(state["schema_version"], "schema_version", SCHEMA_VERSION)  # before the keys of another version
    return Parsed(FORM.parse(state, ""))


def apply(progress: Progress, parsed: Parsed) -> None:
    """Write a parsed state into ``progress``; cannot fail."""
    FORM.store(progress, "", parsed.state)


def pack(progress: Progress) -> list[int]:
    """Every count of ``progress``, flat, in state_dict order (what reduce_state reduces)."""
    progress._flush_time()
    counts: list[int] = []
    FORM.pack(progress, counts)
    return counts


def unpack(progress: Progress, counts: Sequence[int]) -> dict[str, Any]:
    """The state_dict layout of ``progress`` with its counts taken from ``counts`` (as :func:`pack` lays them)."""
    return FORM.unpack(progress, iter(counts).__next__)


def count_paths(progress: Progress) -> list[str]:
    """The key path of each count :func:`pack` gives, e.g. ``stages.train.batches.run.processed``: every int that
    ``state_dict()`` holds but ``schema_version`` and the ledger's."""
    state = {key: value for key, value in dump(progress).items() if key not in ("schema_version", "ledger")}
    return [path for path, value in flat_leaves(state).items() if type(value) is int]


def flat_leaves(value: object, prefix: str = "") -> dict[str, object]:
    """Leaves of nested dicts and lists by dotted key (list items by index; an empty one is a leaf)."""
    items: Iterable[tuple[object, object]] = ()
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    flat: dict[str, object] = {}
    for key, item in items:
        flat.update(flat_leaves(item, join_key(prefix, str(key))))
    return flat or {prefix: value}
