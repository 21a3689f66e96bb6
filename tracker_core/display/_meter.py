"""Batch, sample and token rates of one display line, measured by rich's progress tasks over the time that line's stage ran."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_COUNTED = ("samples", "batches", "tokens")  # what a meter's rich tasks count, in order


class Meter:
    """Rates from ``rich.progress`` task speeds: the counts gained over the last 30 s of this stage's own time,
    which stops while another stage runs (:meth:`pause`/:meth:`resume`). Without rich no rate is known."""

    __slots__ = ("_clock", "_model", "_paused_at", "_paused_for", "_tasks")

    def __init__(self, clock: Callable[[], float], samples: int, batches: int, tokens: int) -> None:
        self._clock = clock
        self._paused_at: float | None = None
        self._paused_for = 0.0
        self._model: Any = None
        self._tasks: list[Any] = []  # rich's tasks of the samples, batches and tokens
        try:
            from rich.progress import Progress
        except ImportError:
            return
        self._model = Progress(get_time=self._stage_time, auto_refresh=False, disable=True)
        for name, count in zip(_COUNTED, (samples, batches, tokens), strict=True):
            self._model.add_task(name, total=None, completed=count)
        self._tasks = self._model.tasks

    def _stage_time(self) -> float:
        now = self._clock() if self._paused_at is None else self._paused_at
        return now - self._paused_for

    def pause(self) -> None:
        """Another stage runs from now: this one's clock stops."""
        if self._paused_at is None:
            self._paused_at = self._clock()

    def resume(self) -> None:
        """This stage runs again: its clock goes on from where it stopped."""
        if self._paused_at is not None:
            self._paused_for += self._clock() - self._paused_at
            self._paused_at = None

    def measure(self, samples: int, batches: int, tokens: int) -> None:
        """The stage's lifetime counts now; counts that went back (a checkpoint was loaded) restart the window."""
        if not self._tasks:  # no rich
            return
        counts = tuple(zip(self._tasks, (samples, batches, tokens), strict=True))
        went_back = any(count < task.completed for task, count in counts)
        set_count = self._model.reset if went_back else self._model.update
        for task, count in counts:
            set_count(task.id, completed=count)

    def speed(self, counted: str) -> float | None:
        """``counted`` (``"samples"``, ``"batches"`` or ``"tokens"``) per second; None without rich or a rate."""
        return self._tasks[_COUNTED.index(counted)].speed if self._tasks else None
