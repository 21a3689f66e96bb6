"""The run ledger (``ledger``) is history: a resumed run has the crashed run's entry that an uninterrupted
one lacks. Exactness compares progress states without it; the ledger has its own tests."""

from __future__ import annotations

from typing import Any


def without_ledger(state: dict[str, Any]) -> dict[str, Any]:
    """A progress state without ``ledger``; a checkpoint entry (``{"progress", ...}``, with any ``ranks``)
    with its progress states stripped the same way."""
    if "progress" in state:
        stripped = {**state, "progress": without_ledger(state["progress"])}
        if "ranks" in state:
            stripped["ranks"] = [without_ledger(rank) for rank in state["ranks"]]
        return stripped
    return {key: value for key, value in state.items() if key != "ledger"}


def without_ledger_times(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ledger entries without their times (``microseconds`` of the entry, of its counts and of its lost work, the
    instant it opened):
    what two runs of one program agree on exactly, under any framework."""
    return [
        {
            **run,
            "start": _untimed(run["start"]),
            "end": _untimed(run["end"]),
            "microseconds": None,
            "opened_unix_microseconds": None,
            "lost": run["lost"] if run["lost"] == "unknown" else _untimed(run["lost"]),
        }
        for run in runs
    ]


def _untimed(counts: dict[str, int]) -> dict[str, int]:
    return {name: value for name, value in counts.items() if name != "microseconds"}
