"""A plain-text table of a saved progress state: stage x granularity x scope."""

from __future__ import annotations

from typing import Any

_SCOPES = ("epoch", "run", "lifetime")


def _scoped(counts: dict[str, int]) -> list[str]:
    return [str(counts[s]) if s in counts else "-" for s in _SCOPES]


def _phased(counts: dict[str, dict[str, int]]) -> list[str]:
    return [str(counts[s]["completed"]) if s in counts else "-" for s in _SCOPES]


def _summed(items: list[dict[str, int]]) -> dict[str, int]:
    return {s: sum(item[s] for item in items) for s in _SCOPES}


def progress_table(progress: dict[str, Any]) -> str:
    """Completed epochs and batches, samples and optimizer steps per stage and scope,
    plus where the state was taken; ``progress`` is a ``Progress.state_dict()``."""
    rows = [("stage", "count", *_SCOPES)]
    for name, stage in progress["stages"].items():
        if not stage["batches"]["lifetime"]["ready"] and not stage["epochs"]["lifetime"]["ready"]:
            continue
        rows.append((name, "epochs", *_phased(stage["epochs"])))
        rows.append(("", "batches", *_phased(stage["batches"])))
        rows.append(("", "samples", *_scoped(stage["samples"])))
        if "optimizer_steps" in stage:
            rows.append(("", "optimizer steps", *_scoped(_summed(stage["optimizer_steps"]))))
            skipped = _summed(stage["optimizer_steps_skipped"])
            if skipped["lifetime"]:
                rows.append(("", "steps skipped", *_scoped(skipped)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    where = progress["where"]
    taken = "nothing happened yet" if not where else " ".join(filter(None, where.values()))
    train = progress["stages"]["train"]
    lines.append(f"taken at: {taken}; run: {progress['run']['kind'] or '-'}; "
                 f"batches into the train epoch: {train['batches']['epoch']['processed']}; "
                 f"accumulating batches: {train['accumulating_batches']}")
    return "\n".join(lines)
