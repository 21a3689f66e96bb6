"""The run ledger of a saved progress state for people: one row per run, and goodput over the model's life."""

from __future__ import annotations

from typing import Any

from tracker_core.display._report import aligned
from tracker_core.state._ledger import UNKNOWN
from tracker_core.state._schema import parse

_NOUNS = (("batches", "batch"), ("samples", "sample"), ("tokens", "token"))  # the lost counts, plural and one
_COLUMNS = ("run", "kind", "world", "batch", "accum", "batches", "samples", "steps", "tokens", "wall", "ended", "lost")


def history_facts(progress: dict[str, Any]) -> dict[str, Any]:
    """The ledger of ``progress`` (a ``Progress.state_dict()``) with its totals, as docs/cli.md's ``history --json``
    lists them (``goodput``: None before any time was recorded); ``ProgressStateError`` if the state is damaged."""
    ledger = parse(progress).state["ledger"]
    earlier = ledger["earlier"]
    runs = [{"number": earlier["runs"] + i, **entry} for i, entry in enumerate(ledger["runs"])]
    productive = earlier["train_microseconds"] + sum(
        r["end"]["microseconds"] - r["start"]["microseconds"] for r in runs
    )
    wall = earlier["microseconds"] + sum(r["microseconds"] for r in runs)
    lost = earlier["lost_microseconds"] + sum(r["lost"]["microseconds"] for r in runs if r["lost"] != UNKNOWN)
    total = wall + lost
    return {
        "runs": runs,
        "earlier": earlier,
        "productive_seconds": productive / 1e6,
        "wall_seconds": wall / 1e6,
        "lost_seconds": lost / 1e6,
        "runs_with_unknown_loss": sum(r["lost"] == UNKNOWN for r in runs),
        "goodput": productive / total if total else None,
    }


def _lost(lost: dict[str, int] | str) -> str:
    if lost == UNKNOWN:
        return "unknown (no heartbeat file; pass heartbeat=PATH to measure it)"
    assert isinstance(lost, dict)
    if not any(lost.values()):
        return "-"
    counts = ", ".join(f"{lost[name]} {one if lost[name] == 1 else name}" for name, one in _NOUNS)
    return f"{counts}, {lost['microseconds'] / 1e6:.1f}s"


def _row(run: dict[str, Any]) -> list[str]:
    return [
        str(run["number"]),
        run["kind"],
        str(run["world_size"]),
        str(run["global_batch_size"] or "-"),
        str(run["accumulation"] or "-"),
        *(f"{run['start'][name]}->{run['end'][name]}" for name in ("batches", "samples", "steps", "tokens")),
        f"{run['microseconds'] / 1e6:.1f}s",
        run["ended"],
        _lost(run["lost"]),
    ]


def history_table(progress: dict[str, Any]) -> str:
    """:func:`history_facts` as text: a row per run (train counts from start to end in lifetime scope) and goodput."""
    facts = history_facts(progress)
    lines = aligned([_COLUMNS, *map(_row, facts["runs"])])
    if not facts["runs"]:
        lines = ["no runs recorded (the ledger began with schema version 4)"]
    earlier = facts["earlier"]
    if earlier["runs"]:
        lines.append(f"+ {earlier['runs']} earlier runs, summed: {earlier['microseconds'] / 1e6:.1f}s wall")
    goodput = facts["goodput"]
    unknown = facts["runs_with_unknown_loss"]
    lines.append(
        "goodput: "
        + ("- (no time recorded)" if goodput is None else f"{goodput:.1%}")
        + f" (productive training {facts['productive_seconds']:.1f}s of {facts['wall_seconds']:.1f}s wall"
        + f" + {facts['lost_seconds']:.1f}s lost"
        + (f"; {unknown} crashed runs lost an unknown amount" if unknown else "")
        + ")"
    )
    return "\n".join(lines)
