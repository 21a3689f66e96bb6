"""A live progress display that reads counts only through a ``ProgressView``.

The framework adapters tell it which stage is running and the totals only they
know (max epochs, batches per epoch); every count it shows comes from the view.
On a terminal it draws a rich ``Live`` line; elsewhere (CI logs) it prints the
same line every ``interval`` seconds and at every epoch end.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any, NamedTuple, TextIO, TypeVar

from tracker_core.counting._view import ProgressView

_SMOOTHING = 0.3  # weight of the newest rate measurement (tqdm's default)
_MIN_MEASURE = 1.0  # seconds between rate measurements
_TERMINAL_REFRESH = 0.1  # seconds between redraws of the live line
Batch = TypeVar("Batch")
_NO_RICH = 'progress display: rich is not installed (pip install "tracker-core[display]"), printing plain lines instead'


class Status(NamedTuple):
    """One line of the display: what is running and how far it has got."""

    stage: str
    epoch: int | None  # 1-based train epoch of the fit run; None outside a fit
    max_epochs: int | None
    batch: int  # batches of this stage's epoch whose step is done
    batches: int | None  # batches per epoch of this stage; None when unknown
    steps: int | None  # optimizer steps of the fit run; None outside a fit
    samples_per_second: float | None
    eta: float | None  # seconds; None when a total or the rate is unknown


def format_status(status: Status) -> str:
    """The one line format every framework shows, e.g.
    ``train    | epoch 2/3 | batch 4/6 | steps 10 | 12.5 samples/s | ETA 0:00:05``."""
    parts = [f"{status.stage:<8}"]
    if status.epoch is not None:
        parts.append(f"epoch {_of(status.epoch, status.max_epochs)}")
    parts.append(f"batch {_of(status.batch, status.batches)}")
    if status.steps is not None:
        parts.append(f"steps {status.steps}")
    if status.samples_per_second is not None:
        parts.append(f"{status.samples_per_second:.1f} samples/s")
    if status.eta is not None:
        parts.append(f"ETA {_clock_time(status.eta)}")
    return " | ".join(parts)


def _of(count: int, total: int | None) -> str:
    return f"{count}" if total is None else f"{count}/{total}"


def _clock_time(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


class _Meter:
    """Smoothed samples/s and batches/s of one stage, measured only while that stage runs."""

    __slots__ = ("batches", "batches_rate", "samples", "samples_rate", "time")

    def __init__(self) -> None:
        self.time = 0.0
        self.samples = 0
        self.batches = 0
        self.samples_rate: float | None = None
        self.batches_rate: float | None = None

    def rebase(self, now: float, samples: int, batches: int) -> None:
        """Measure from here on (the stage resumes after another ran): keep the smoothed rates."""
        self.time, self.samples, self.batches = now, samples, batches

    def measure(self, now: float, samples: int, batches: int) -> None:
        elapsed = now - self.time
        if samples < self.samples or batches < self.batches:  # a checkpoint was loaded
            self.rebase(now, samples, batches)
            return
        if elapsed < _MIN_MEASURE:
            return
        self.samples_rate = _smooth(self.samples_rate, (samples - self.samples) / elapsed)
        self.batches_rate = _smooth(self.batches_rate, (batches - self.batches) / elapsed)
        self.rebase(now, samples, batches)


def _smooth(old: float | None, new: float) -> float:
    return new if old is None else _SMOOTHING * new + (1 - _SMOOTHING) * old


class Display:
    """Shows the progress of ``view``; the adapter calls :meth:`update` after each batch.

    ``terminal``: draw a live line (needs rich) rather than plain lines; ``None``
    asks ``stream.isatty()``. ``interval``: seconds between plain lines.
    """

    def __init__(
        self,
        view: ProgressView,
        *,
        stream: TextIO | None = None,
        terminal: bool | None = None,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._view = view
        self._stream = stream if stream is not None else sys.stdout
        self._interval = interval
        self._clock = clock
        self._max_epochs: int | None = None
        self._batches: dict[str, int | None] = {}
        self._meters: dict[str, _Meter] = {}
        self._stage = ""
        self._live: _Live | None = None
        if terminal is None:
            terminal = self._stream.isatty()
        if terminal:
            try:
                self._live = _Live(self._stream)
            except ImportError:
                self._write(_NO_RICH)
        self._due = clock() + (0.0 if self._live is not None else interval)

    # totals only the framework knows -------------------------------------------------
    def set_max_epochs(self, max_epochs: int | None) -> None:
        """Train epochs the fit run ends after, counted in the run (as ``view.train.epochs.run``)."""
        self._max_epochs = max_epochs

    def set_batches(self, stage: str, batches: int | None) -> None:
        """Batches per epoch of ``stage``; ``None`` when unknown (e.g. an iterable dataset)."""
        self._batches[stage] = batches

    # driven by the adapter -------------------------------------------------------------
    def update(self, stage: str) -> None:
        """``stage`` is running: redraw or print a line when due (cheap otherwise)."""
        if stage != self._stage:
            self._switch(stage)
        now = self._clock()
        if now >= self._due:
            self._show(now)

    def epoch_end(self, stage: str) -> None:
        """An epoch of ``stage`` has done its batches: show its final line (kept on a terminal)."""
        if stage != self._stage:
            self._switch(stage)
        now = self._clock()
        line = format_status(self._status(now))
        if self._live is not None:
            self._live.stop()
            self._live.print(line)
            self._due = now
        else:
            self._write(line)
            self._due = now + self._interval

    def iterate(self, batches: Generator[Batch, None, None], stage: str, per_epoch: int | None) -> Iterator[Batch]:
        """A loop's pass over one epoch of ``stage``, shown after each batch and at its end.

        ``batches`` marks a batch processed when asked for the next one (as a tracking
        loop's generator does): each batch is shown once the next is fetched, or the pass ends.
        """
        self.set_batches(stage, per_epoch)
        self.update(stage)
        try:
            for batch in batches:
                self.update(stage)
                yield batch
        finally:
            batches.close()  # the pass's own end marks (a loop that broke out) come first
            self.epoch_end(stage)

    def close(self) -> None:
        """The run ended (or failed): stop drawing."""
        if self._live is not None:
            self._live.stop()

    def write(self, text: str) -> None:
        """Print ``text`` above the live line (or as a plain line)."""
        if self._live is not None:
            self._live.print(text)
        else:
            self._write(text)

    # reading the view ------------------------------------------------------------------
    def _status(self, now: float) -> Status:
        """The current stage's status, measuring its rates at ``now``."""
        view = self._view
        name = self._stage
        stage = view.stage(name)
        meter = self._meters[name]
        meter.measure(now, stage.samples.lifetime, stage.batches.lifetime.processed)
        done = stage.batches.epoch.processed
        fit = view.run.kind == "fit"
        epoch = view.train.epochs.run.ready if fit else None
        total = self._batches.get(name)
        return Status(
            stage=name,
            epoch=epoch,
            max_epochs=self._max_epochs if fit else None,
            batch=done,
            batches=total,
            steps=view.global_step if fit else None,
            samples_per_second=meter.samples_rate,
            eta=self._eta(name, done, total, epoch, meter.batches_rate),
        )

    def _eta(self, stage: str, done: int, total: int | None, epoch: int | None, rate: float | None) -> float | None:
        """Seconds left at ``rate`` batches/s: of the fit's train batches, or of an evaluation epoch."""
        if total is None or not rate:
            return None
        remaining = max(total - done, 0)
        if stage == "train":
            if self._max_epochs is None or epoch is None:
                return None
            remaining += max(self._max_epochs - epoch, 0) * total
        return remaining / rate

    def _switch(self, stage: str) -> None:
        """Another stage runs now: the last one's rates are measured up to now, the new one's from now."""
        now = self._clock()
        if self._stage:
            last = self._view.stage(self._stage)
            self._meters[self._stage].measure(now, last.samples.lifetime, last.batches.lifetime.processed)
        self._stage = stage
        view = self._view.stage(stage)
        self._meters.setdefault(stage, _Meter()).rebase(now, view.samples.lifetime, view.batches.lifetime.processed)

    def _show(self, now: float) -> None:
        status = self._status(now)
        if self._live is not None:
            self._live.show(status)
            self._due = now + _TERMINAL_REFRESH
        else:
            self._write(format_status(status))
            self._due = now + self._interval

    def _write(self, line: str) -> None:
        self._stream.write(line + "\n")
        self._stream.flush()


class _Live:
    """A rich ``Live`` line (a bar and the status text), started on demand and stopped at epoch ends."""

    def __init__(self, stream: TextIO) -> None:
        from rich.console import Console

        self._console = Console(file=stream, force_terminal=True)
        self._live: Any = None

    def show(self, status: Status) -> None:
        from rich.live import Live
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        row = Table.grid(padding=(0, 1))
        row.add_column()
        row.add_column(no_wrap=True, overflow="ellipsis")
        row.add_row(ProgressBar(total=status.batches, completed=status.batch, width=20), Text(format_status(status)))
        if self._live is None:
            self._live = Live(row, console=self._console, auto_refresh=False, transient=True)
            self._live.start()
        self._live.update(row, refresh=True)

    def print(self, text: str) -> None:
        from rich.text import Text

        self._console.print(Text(text), soft_wrap=True)

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
