"""A progress state without its wall-clock times, for comparing the counts of two runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_TIMES = "microseconds"  # every wall-clock field of the saved form is named so, or ends so


def without_times(state: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` (a ``state_dict()`` of the progress) without its wall-clock times.

    Every entry named ``microseconds`` or ``*_microseconds`` goes, at any depth: each stage's
    time and the checkpoint save, restore and fast-forward times. One run repeated at another
    speed differs from the first only in those, so ``without_times(a) == without_times(b)``
    compares what the two counted.
    ``state`` is not changed.
    """
    return {key: _without(value) for key, value in state.items() if not key.endswith(_TIMES)}


def _without(value: Any) -> Any:
    if isinstance(value, Mapping):
        return without_times(value)
    if isinstance(value, list):
        return [_without(item) for item in value]
    return value
