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
