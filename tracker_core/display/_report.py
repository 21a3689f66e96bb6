"""A saved progress state for people: a plain-text table (stage x granularity x scope) and derived facts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tracker_core.counting._progress import Progress
from tracker_core.counting._view import ProgressView
from tracker_core.vocabulary import Phase, Scope


def _scoped(counts: dict[str, int]) -> list[str]:
    return [str(counts[s]) if s in counts else "-" for s in Scope]


def _phased(counts: dict[str, dict[str, int]]) -> list[str]:
    return [str(counts[s][Phase.PROCESSED]) if s in counts else "-" for s in Scope]


def _batches(count: int) -> str:
    return f"{count} batch" if count == 1 else f"{count} batches"


def _rounded(values: Sequence[float | None], digits: int) -> list[str]:
    return ["-" if value is None else f"{value:.{digits}f}" for value in values]


def _summed(items: list[dict[str, int]]) -> dict[str, int]:
    return {s: sum(item[s] for item in items) for s in Scope}


def _loaded(progress: dict[str, Any]) -> ProgressView:
    """The view of ``progress`` loaded; ``ProgressStateError`` if it is damaged."""
    loaded = Progress()
    loaded.load_state_dict(progress)
    return loaded.view


def progress_facts(progress: dict[str, Any], view: ProgressView | None = None) -> dict[str, Any]:
    """What a resume from ``progress`` (a ``Progress.state_dict()``, its ``view`` if loaded already) starts from,
    as plain data (docs/cli.md, ``facts``); ``ProgressStateError`` if the state is damaged."""
    view = _loaded(progress) if view is None else view
    where = progress["where"]  # the last event phase marked, e.g. "train batch processed"
    return {
        "taken_at": " ".join(filter(None, where.values())) if where else "nothing happened yet",
        "run_kind": progress["run"]["kind"],
        "global_step": view.global_step,
        "epoch_index": view.epoch_index,
        "batches_into_epoch": view.train.batches.epoch.completed if view.train.epochs.lifetime.in_flight else 0,
        "mid_epoch": view.is_mid_epoch,
        "mid_accumulation": view.is_mid_accumulation,
        "accumulating_batches": view.train.accumulating_batches,
        "anomalies": list(view.anomalies),
    }


def aligned(rows: Sequence[Sequence[str]], *, rule: bool = False) -> list[str]:
    """``rows`` as lines of left-aligned columns two spaces apart; ``rule``: dashes under the first row."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    if rule:
        lines.insert(1, "  ".join("-" * width for width in widths))
    return lines


def progress_table(progress: dict[str, Any]) -> str:
    """``progress`` (a ``Progress.state_dict()``) for people: its counts per stage and scope (docs/cli.md,
    ``inspect``), where it was taken, whether mid-epoch or mid-accumulation, overhead seconds and anomalies."""
    view = _loaded(progress)
    rows = [("stage", "count", *(scope.value for scope in Scope))]
    for name, stage in progress["stages"].items():
        if not stage["batches"]["lifetime"]["ready"] and not stage["epochs"]["lifetime"]["ready"]:
            continue
        timed = view.stage(name)
        rows.append((name, "epochs", *_phased(stage["epochs"])))
        rows.append(("", "batches", *_phased(stage["batches"])))
        rows.append(("", "samples", *_scoped(stage["samples"])))
        rows.append(("", "seconds", *_rounded(timed.seconds, 2)))
        rows.append(("", "samples/s", *_rounded(timed.samples_per_second, 1)))
        if timed.tokens.lifetime:  # a stage that counted no tokens shows none
            rows.append(("", "tokens", *map(str, timed.tokens)))
            rows.append(("", "non-padding tokens", *map(str, timed.non_padding_tokens)))
            rows.append(("", "tokens/s", *_rounded(timed.tokens_per_second, 1)))
        if "optimizer_steps" in stage:
            rows.append(("", "optimizer steps", *_scoped(_summed(stage["optimizer_steps"]))))
            skipped = _summed(stage["optimizer_steps_skipped"])
            if skipped["lifetime"]:
                rows.append(("", "steps skipped", *_scoped(skipped)))
            if stage["scheduler_steps"]["lifetime"]:
                rows.append(("", "scheduler steps", *_scoped(stage["scheduler_steps"])))
    lines = aligned(rows, rule=True)
    facts = progress_facts(progress, view)
    lines.append(f"taken at: {facts['taken_at']}; run: {facts['run_kind'] or '-'}; global step: {facts['global_step']}")
    epoch = f"yes, {_batches(facts['batches_into_epoch'])} into train epoch {facts['epoch_index']} (0-based)"
    accumulation = f"yes, {_batches(facts['accumulating_batches'])} not yet applied by an optimizer step"
    lines.append(
        f"mid-epoch: {epoch if facts['mid_epoch'] else 'no'}; "
        f"mid-accumulation: {accumulation if facts['mid_accumulation'] else 'no'}"
    )
    overhead = view.overhead_seconds
    lines.append(
        f"seconds over the lifetime: checkpoint saves {overhead.checkpoint_save.lifetime:.2f}, "
        f"restores {overhead.checkpoint_restore.lifetime:.2f}, "
        f"fast-forward (batches read again) {overhead.fast_forward.lifetime:.2f}"
    )
    anomalies = facts["anomalies"]
    lines.append(f"anomalies: {len(anomalies)}" if anomalies else "anomalies: none")
    lines.extend(f"  - {message}" for message in anomalies)
    return "\n".join(lines)
