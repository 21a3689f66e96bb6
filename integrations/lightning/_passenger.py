"""The guard of the callback's hooks: the order Lightning runs them in never makes one raise."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from tracker_core import EventOrderError

_P = ParamSpec("_P")


class _NotesAnomalies(Protocol):
    def _anomaly(self, message: str) -> None: ...


_Callback = TypeVar("_Callback", bound=_NotesAnomalies)


def passenger(
    hook: Callable[Concatenate[_Callback, _P], None],
) -> Callable[Concatenate[_Callback, _P], None]:
    """A hook that never raises because Lightning ran hooks in an order the record did not expect:
    the record notes the anomaly (``view.anomalies``) and warns once; Lightning carries on."""

    def guarded(self: _Callback, /, *args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            hook(self, *args, **kwargs)
        except EventOrderError as error:
            self._anomaly(f"{hook.__name__}: {error}")

    functools.update_wrapper(guarded, hook)
    return guarded
