"""The parts a saved form is declared with; each knows its piece of every walk over the form: ``dump`` reads a
live object's plain data, ``parse`` validates plain data into a fresh value (ProgressStateError naming the key),
``store`` writes a parsed value onto ``owner.attr`` (``attr == ""``: the owner itself) and cannot fail; ``pack``
and ``unpack`` make the flat list of counts that ``reduce_state`` reduces (see :class:`Part`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise
from operator import attrgetter
from typing import Any, NamedTuple

from tracker_core._errors import ProgressStateError
from tracker_core.counting._counts import PhaseCounts, Phased, Tally
from tracker_core.state._readers import join_key, read_counts, read_int, read_list, read_mapping
from tracker_core.vocabulary import Phase, Scope

PHASES = tuple(phase.value for phase in Phase)
SCOPES = tuple(scope.value for scope in Scope)
_BASES = {Scope.EPOCH.value: "epoch_base", Scope.RUN.value: "run_base"}  # lifetime has no base


def _part_of(owner: Any, attr: str) -> Any:
    return getattr(owner, attr) if attr else owner


def _same(live: Any) -> Any:
    return live


def _zero(live: Any) -> int:
    return 0


class Part:
    """One part of a saved form; this base holds no count."""

    def dump(self, live: Any) -> Any:
        raise NotImplementedError

    def parse(self, raw: object, key: str) -> Any:
        raise NotImplementedError

    def store(self, owner: Any, attr: str, value: Any) -> None:
        if attr:  # else a value that the live object does not hold (the schema version)
            setattr(owner, attr, value)

    def pack(self, live: Any, out: list[int]) -> None:
        """Append this part's counts to ``out`` (none here)."""

    def unpack(self, live: Any, take: Callable[[], int]) -> Any:
        """Rebuild this part's plain data, taking its counts in ``pack`` order from ``take()``."""
        return self.dump(live)


class PhaseCount(Part):
    """A phased counter in ``scopes`` (``{scope: {phase: n}}``), or its lifetime phases alone (``{phase: n}``)."""

    def __init__(self, scopes: Sequence[Scope] = ()) -> None:
        self.scopes = tuple(scope.value for scope in scopes)
        bases = tuple((scope, attrgetter(_BASES[scope]) if scope in _BASES else _zero) for scope in self.scopes)
        self._base_of = bases or (("", _zero),)  # no scopes: the lifetime alone, its phases not under a scope key

    def dump(self, live: Phased) -> dict[str, Any]:
        ready, started, processed, completed = live.ready, live.started, live.processed, live.completed
        dumped = {}
        for scope, base_of in self._base_of:
            base = base_of(live)
            dumped[scope] = {
                "ready": ready - base,
                "started": started - base,
                "processed": processed - base,
                "completed": completed - base,
            }
        return dumped if self.scopes else dumped[""]

    def parse(self, raw: object, key: str) -> PhaseCounts | dict[str, PhaseCounts]:
        if not self.scopes:
            return phase_counts(raw, key)
        fields = read_mapping(raw, key, required=self.scopes)
        parsed = {scope: phase_counts(fields[scope], join_key(key, scope)) for scope in self.scopes}
        for inner, outer in pairwise(self.scopes):  # ``inner`` is ``outer`` less one baseline, the same in each phase
            offset = parsed[outer].ready - parsed[inner].ready
            if offset < 0:
                raise ProgressStateError(join_key(key, inner), f"{inner} scope above {outer} scope")
            if any(o - i != offset for o, i in zip(parsed[outer], parsed[inner], strict=True)):
                problem = f"{inner} and {outer} scopes differ by different amounts across phases"
                raise ProgressStateError(join_key(key, inner), problem)
        return parsed

    def store(self, owner: Any, attr: str, value: Any) -> None:
        counter: Phased = _part_of(owner, attr)
        lifetime: PhaseCounts = value[Scope.LIFETIME] if self.scopes else value
        counter.ready, counter.started, counter.processed, counter.completed = lifetime
        if self.scopes:
            counter.run_base = lifetime.ready - value[Scope.RUN].ready
            counter.epoch_base = lifetime.ready - value.get(Scope.EPOCH, value[Scope.RUN]).ready

    def pack(self, live: Phased, out: list[int]) -> None:
        ready, started, processed, completed = live.ready, live.started, live.processed, live.completed
        for _, base_of in self._base_of:
            base = base_of(live)
            out += (ready - base, started - base, processed - base, completed - base)

    def unpack(self, live: Phased, take: Callable[[], int]) -> dict[str, Any]:
        unpacked = {}
        for scope, _ in self._base_of:
            unpacked[scope] = {"ready": take(), "started": take(), "processed": take(), "completed": take()}
        return unpacked if self.scopes else unpacked[""]


class TallyCount(Part):
    """A tally in ``scopes`` (``{scope: n}``, every scope unless given); without the epoch scope, a load sets
    the tally's epoch base to its run base."""

    def __init__(self, scopes: Sequence[Scope] = tuple(Scope)) -> None:
        self.scopes = tuple(scope.value for scope in scopes)
        self._every_scope = self.scopes == SCOPES

    def dump(self, live: Tally) -> dict[str, int]:
        total = live.total
        dumped = {"epoch": total - live.epoch_base, "run": total - live.run_base, "lifetime": total}
        return dumped if self._every_scope else {scope: dumped[scope] for scope in self.scopes}

    def parse(self, raw: object, key: str) -> dict[str, int]:
        parsed = read_counts(raw, key, self.scopes)
        for inner, outer in pairwise(self.scopes):
            if parsed[inner] > parsed[outer]:
                raise ProgressStateError(key, f"{inner} scope {parsed[inner]} above {outer} scope {parsed[outer]}")
        return parsed

    def store(self, owner: Any, attr: str, value: dict[str, int]) -> None:
        tally: Tally = _part_of(owner, attr)
        tally.total = value[Scope.LIFETIME]
        tally.run_base = tally.total - value[Scope.RUN]
        tally.epoch_base = tally.total - value.get(Scope.EPOCH, value[Scope.RUN])

    def pack(self, live: Tally, out: list[int]) -> None:
        out += self.dump(live).values()

    def unpack(self, live: Tally, take: Callable[[], int]) -> dict[str, int]:
        return {scope: take() for scope in self.scopes}


class Count(Part):
    """One non-negative count, read and written as the owner's attribute."""

    def dump(self, live: int) -> int:
        return live

    def parse(self, raw: object, key: str) -> int:
        return read_int(raw, key, minimum=0)

    def pack(self, live: int, out: list[int]) -> None:
        out.append(live)

    def unpack(self, live: int, take: Callable[[], int]) -> int:
        return take()


class Field(NamedTuple):
    """``key`` in the saved dict holds ``part``, read from the live object's ``attr``."""

    key: str
    attr: str
    part: Part


class Record(Part):
    """A dict with exactly ``fields``; ``check(parsed, key)`` validates what spans several of them."""

    def __init__(self, *fields: Field, check: Callable[[dict[str, Any], str], None] | None = None) -> None:
        self.fields = fields
        self.keys = tuple(field.key for field in fields)
        self.check = check
        # per field: its key, how to get its live part, and the part (a loop, not a comprehension: no frame per call)
        self._walk = tuple((key, attrgetter(attr) if attr else _same, part) for key, attr, part in fields)

    def dump(self, live: Any) -> dict[str, Any]:
        dumped = {}
        for key, get, part in self._walk:
            dumped[key] = part.dump(get(live))
        return dumped

    def parse(self, raw: object, key: str) -> dict[str, Any]:
        fields = read_mapping(raw, key, required=self.keys)
        parsed = {name: part.parse(fields[name], join_key(key, name)) for name, _, part in self.fields}
        if self.check is not None:
            self.check(parsed, key)
        return parsed

    def store(self, owner: Any, attr: str, value: dict[str, Any]) -> None:
        live = _part_of(owner, attr)
        for key, field_attr, part in self.fields:
            part.store(live, field_attr, value[key])

    def pack(self, live: Any, out: list[int]) -> None:
        for _, get, part in self._walk:
            part.pack(get(live), out)

    def unpack(self, live: Any, take: Callable[[], int]) -> dict[str, Any]:
        unpacked = {}
        for key, get, part in self._walk:
            unpacked[key] = part.unpack(get(live), take)
        return unpacked


class ListOf(Part):
    """A list of ``item``; a load makes each live item with ``make()``."""

    def __init__(self, item: Part, make: Callable[[], Any]) -> None:
        self.item = item
        self.make = make

    def dump(self, live: list[Any]) -> list[Any]:
        return list(map(self.item.dump, live))

    def parse(self, raw: object, key: str) -> list[Any]:
        return [self.item.parse(element, join_key(key, str(i))) for i, element in enumerate(read_list(raw, key))]

    def store(self, owner: Any, attr: str, value: list[Any]) -> None:
        made = []
        for element in value:
            live = self.make()
            self.item.store(live, "", element)
            made.append(live)
        setattr(owner, attr, made)

    def pack(self, live: list[Any], out: list[int]) -> None:
        pack = self.item.pack
        for element in live:
            pack(element, out)

    def unpack(self, live: list[Any], take: Callable[[], int]) -> list[Any]:
        unpack = self.item.unpack
        return [unpack(element, take) for element in live]


class Value(Part):
    """A part that holds no count: ``dump`` and ``parse`` are given; ``store`` sets the attribute."""

    def __init__(self, dump: Callable[[Any], Any], parse: Callable[[object, str], Any]) -> None:
        self._dump = dump
        self._parse = parse

    def dump(self, live: Any) -> Any:
        return self._dump(live)

    def parse(self, raw: object, key: str) -> Any:
        return self._parse(raw, key)


def phase_counts(value: object, key: str) -> PhaseCounts:
    """Phase counts in order (``ready >= started >= processed >= completed``), at most one event in flight."""
    counts = PhaseCounts(*read_counts(value, key, PHASES).values())
    for before, after in pairwise(PHASES):
        if getattr(counts, before) < getattr(counts, after):
            raise ProgressStateError(
                key, f"phases out of order: {before} {getattr(counts, before)} < {after} {getattr(counts, after)}"
            )
    if counts.ready - counts.completed > 1:
        raise ProgressStateError(key, f"{counts.ready - counts.completed} events in flight; at most 1 can be")
    return counts
