"""The time fields of progress states (``microseconds``), compared by presence and order, never by value."""

from __future__ import annotations

from typing import Any


def time_fields(state: dict[str, Any]) -> dict[str, int]:
    """Every time of a progress state by its key path, e.g. ``stages.train.microseconds.run``."""
    fields = {
        f"microseconds.{name}.{scope}": us
        for name, scoped in state["microseconds"].items()
        for scope, us in scoped.items()
    }
    for stage, counts in state["stages"].items():
        fields.update({f"stages.{stage}.microseconds.{scope}": us for scope, us in counts["microseconds"].items()})
    return fields


def out_of_order(state: dict[str, Any]) -> list[str]:
    """The time fields whose scopes are not ``epoch <= run <= lifetime``."""
    found = []
    for key, scoped in [(f"microseconds.{n}", s) for n, s in state["microseconds"].items()] + [
        (f"stages.{n}.microseconds", s["microseconds"]) for n, s in state["stages"].items()
    ]:
        values = [scoped[scope] for scope in ("epoch", "run", "lifetime") if scope in scoped]
        if values != sorted(values) or values[0] < 0:
            found.append(key)
    return found


def went_back(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """Lifetime time fields of ``after`` below those of ``before`` (time never runs back across a resume)."""
    earlier, later = time_fields(before), time_fields(after)
    return [key for key in earlier if key.endswith(".lifetime") and later[key] < earlier[key]]


def ledger_time_fields(state: dict[str, Any]) -> dict[str, int]:
    """Every time of the run ledger by key path: ``ledger.runs.<i>.microseconds`` (wall), ``.start.microseconds``
    and ``.end.microseconds`` (train time) and ``.lost.microseconds`` (wall time lost, when measured)."""
    fields = {}
    for i, run in enumerate(state["ledger"]["runs"]):
        fields[f"ledger.runs.{i}.microseconds"] = run["microseconds"]
        fields[f"ledger.runs.{i}.start.microseconds"] = run["start"]["microseconds"]
        fields[f"ledger.runs.{i}.end.microseconds"] = run["end"]["microseconds"]
        if run["lost"] != "unknown":
            fields[f"ledger.runs.{i}.lost.microseconds"] = run["lost"]["microseconds"]
    return fields


def ledger_went_back(state: dict[str, Any]) -> list[str]:
    """Ledger train times running back: an entry ending below its start, or starting below the previous start."""
    found = []
    previous = 0
    for i, run in enumerate(state["ledger"]["runs"]):
        start, end = run["start"]["microseconds"], run["end"]["microseconds"]
        if end < start:
            found.append(f"ledger.runs.{i}.end.microseconds")
        if start < previous:
            found.append(f"ledger.runs.{i}.start.microseconds")
        previous = start
    return found
