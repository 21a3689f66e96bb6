"""What two runs of one program must agree on: a progress state without its wall-clock times and run ledger."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

_TIMES = "microseconds"  # every wall-clock field of the saved form is named so, or ends so
_HISTORY = "ledger"  # the runs that made the state: a resumed run rightly has more than an uninterrupted one


def comparable_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``state`` (a progress ``state_dict()``) without the run ledger and the wall-clock fields (keys
    ending ``microseconds``, at any depth): ``comparable_state(resumed) == comparable_state(uninterrupted)``."""
    return {key: _without_times(value) for key, value in state.items() if key != _HISTORY and not key.endswith(_TIMES)}


def _without_times(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _without_times(item) for key, item in value.items() if not key.endswith(_TIMES)}
    if isinstance(value, list):
        return [_without_times(item) for item in value]
    return value
