"""Batch, sample and token rates of one display line, measured by rich's progress tasks over the time that line's stage ran."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SPEED_WINDOW = 30.0  # seconds of samples rich averages a speed over (its default)


class Meter:
    """Rates from ``rich.progress`` task speeds: the counts gained over the last 30 s of this stage's own time.

    The stage's clock stops while another stage runs (:meth:`pause`/:meth:`resume`), so time
    spent validating does not lower the train rate. A rate is known from the second measurement
    that saw the counts grow. Without rich no rate is ever known.
    """

    __slots__ = ("_batches", "_clock", "_model", "_paused_at", "_paused_for", "_samples", "_tasks", "_tokens")

    def __init__(self, clock: Callable[[], float], samples: int, batches: int, tokens: int) -> None:
        self._clock = clock
        self._paused_at: float | None = None
        self._paused_for = 0.0
        self._model: Any = None
        try:
            from rich.progress import Progress
        except ImportError:
            return
        self._model = Progress(get_time=self._stage_time, auto_refresh=False, disable=True)
        self._samples = self._model.add_task("samples", total=None, completed=samples)
        self._batches = self._model.add_task("batches", total=None, completed=batches)
        self._tokens = self._model.add_task("tokens", total=None, completed=tokens)
        self._tasks = {task.id: task for task in self._model.tasks}

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
        model = self._model
        if model is None:
            return
        counts = ((self._samples, samples), (self._batches, batches), (self._tokens, tokens))
        went_back = any(count < self._tasks[task].completed for task, count in counts)
        for task, count in counts:
            if went_back:
                model.reset(task, completed=count)
            else:
                model.update(task, completed=count)

    @property
    def samples_per_second(self) -> float | None:
        return None if self._model is None else self._tasks[self._samples].speed

    @property
    def batches_per_second(self) -> float | None:
        return None if self._model is None else self._tasks[self._batches].speed

    @property
    def tokens_per_second(self) -> float | None:
        return None if self._model is None else self._tasks[self._tokens].speed
