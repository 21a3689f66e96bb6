"""The live progress display (docs/display.md): every count it shows comes from a ``ProgressView``; the adapter
tells it the running stage, the totals only the framework knows and, optionally, the metrics to show."""

from __future__ import annotations

import sys
import time
import warnings
from collections.abc import Callable, Generator, Iterator, Mapping
from numbers import Number
from typing import NamedTuple, TextIO, TypeVar

from tracker_core.counting._view import ProgressView
from tracker_core.display._meter import Meter
from tracker_core.display._terminal import LiveLine, write_line

_SAMPLE_EVERY = 0.1  # seconds between rate samples (and redraws of the live line)
Batch = TypeVar("Batch")
Metrics = Callable[[str], Mapping[str, object]]
_NO_RICH = (
    'progress display: rich is not installed (pip install "tracker-core[display]"): '
    "plain lines, without samples/s or ETA"
)


class Status(NamedTuple):
    """One line of the display: what is running, how far it has got, and the metrics shown with it."""

    stage: str  # the line's name: the stage, or the name the adapter was given for it
    epoch: int | None  # 1-based train epoch of the fit run; None outside a fit
    max_epochs: int | None
    batch: int  # batches of this stage's epoch whose step is done
    batches: int | None  # batches per epoch of this stage; None when unknown
    steps: int | None  # optimizer steps of the fit run; None outside a fit
    samples_per_second: float | None
    eta: float | None  # seconds; None when a total or the rate is unknown
    metrics: tuple[tuple[str, str], ...] = ()  # (name, formatted value), in the order given
    tokens_per_second: float | None = None  # None also when the stage has counted no tokens


def format_status(status: Status) -> str:
    """The one line format every framework shows, e.g.
    ``train    | epoch 2/3 | batch 4/6 | steps 10 | 12.5 samples/s | 1,600 tokens/s | ETA 0:00:05 | loss=0.25``."""
    parts = [f"{status.stage:<8}"]
    if status.epoch is not None:
        parts.append(f"epoch {_of(status.epoch, status.max_epochs)}")
    parts.append(f"batch {_of(status.batch, status.batches)}")
    if status.steps is not None:
        parts.append(f"steps {status.steps}")
    if status.samples_per_second is not None:
        parts.append(f"{status.samples_per_second:.1f} samples/s")
    if status.tokens_per_second is not None:
        parts.append(f"{status.tokens_per_second:,.0f} tokens/s")
    if status.eta is not None:
        parts.append(f"ETA {_clock_time(status.eta)}")
    if status.metrics:
        parts.append(", ".join(f"{name}={value}" for name, value in status.metrics))
    return " | ".join(parts)


def format_metric(value: object) -> str:
    """A metric as tqdm's postfix shows it: numbers (and one-element tensors) in 3 significant digits."""
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "numel", lambda: 0)() == 1:
        value = item()
    if isinstance(value, Number) and not isinstance(value, bool):
        short = f"{value:.3g}".replace("e+0", "e+").replace("e-0", "e-")
        return short if len(short) < len(str(value)) else str(value)
    return str(value).strip()


def _of(count: int, total: int | None) -> str:
    return f"{count}" if total is None else f"{count}/{total}"


def _clock_time(seconds: float) -> str:
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


class Display:
    """Shows the progress of ``view``; the adapter calls :meth:`update` after each batch. ``terminal``: draw a live
    line (needs rich; ``None`` asks ``stream.isatty()``), else plain lines every ``interval`` seconds.
    ``metrics(name)``: the metrics line ``name`` shows (what it raises is warned once)."""

    def __init__(
        self,
        view: ProgressView,
        *,
        stream: TextIO | None = None,
        terminal: bool | None = None,
        interval: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        metrics: Metrics | None = None,
    ) -> None:
        self._view = view
        self._stream = stream if stream is not None else sys.stdout
        self._interval = interval
        self._clock = clock
        self._metrics = metrics
        self._metrics_failed = False
        self._max_epochs: int | None = None
        self._batches: dict[str, int | None] = {}
        self._meters: dict[str, Meter] = {}  # per line name
        self._name = ""  # the current line
        self._stage = ""  # the view's stage it counts
        if terminal is None:
            terminal = self._stream.isatty()
        try:
            import rich  # noqa: F401
        except ImportError:
            write_line(self._stream, _NO_RICH)
            terminal = False
        self._live = LiveLine(self._stream) if terminal else None
        self._sample_due = 0.0
        self._due = clock() + (0.0 if self._live is not None else interval)  # a live line: at every sample

    # totals only the framework knows -------------------------------------------------
    def set_max_epochs(self, max_epochs: int | None) -> None:
        """Train epochs the fit run ends after, counted in the run (as ``view.train.epochs.run``)."""
        self._max_epochs = max_epochs

    def set_batches(self, name: str, batches: int | None) -> None:
        """Batches per epoch of the line ``name``; ``None`` when unknown (e.g. an iterable dataset)."""
        self._batches[name] = batches

    # driven by the adapter -------------------------------------------------------------
    def update(self, stage: str, name: str | None = None) -> None:
        """``stage`` ran a batch, shown as ``name`` (default: the stage); cheap unless a line is due."""
        self._switch(stage, name or stage)
        now = self._clock()
        if now >= self._sample_due:
            self._measure(now)
            if now >= self._due:
                self._show(now)

    def epoch_end(self, stage: str, name: str | None = None) -> None:
        """An epoch of ``stage`` has done its batches: show its final line (kept on a terminal)."""
        self._switch(stage, name or stage)
        now = self._clock()
        self._measure(now)
        self._show(now, final=True)

    def iterate(self, batches: Generator[Batch, None, None], stage: str, per_epoch: int | None) -> Iterator[Batch]:
        """A loop's pass over one epoch of ``stage``, shown after each batch and at its end; ``batches`` marks a
        batch processed when asked for the next one (as a tracking loop's generator does)."""
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
            write_line(self._stream, text)

    # reading the view ------------------------------------------------------------------
    def _counts(self) -> tuple[int, int, int]:
        """What a meter measures: the current stage's lifetime samples, processed batches and tokens."""
        stage = self._view.stage(self._stage)
        return stage.samples.lifetime, stage.batches.lifetime.processed, stage.tokens.lifetime

    def _measure(self, now: float) -> None:
        self._meters[self._name].measure(*self._counts())
        self._sample_due = now + _SAMPLE_EVERY

    def _status(self) -> Status:
        """The current line's status, at the rates measured last."""
        view, meter = self._view, self._meters[self._name]
        stage = view.stage(self._stage)
        done = stage.batches.epoch.processed
        fit = view.run.kind == "fit"
        epoch = view.train.epochs.run.ready if fit else None
        total = self._batches.get(self._name)
        return Status(
            stage=self._name,
            epoch=epoch,
            max_epochs=self._max_epochs if fit else None,
            batch=done,
            batches=total,
            steps=view.global_step if fit else None,
            samples_per_second=meter.speed("samples"),
            eta=self._eta(done, total, epoch, meter.speed("batches")),
            metrics=self._shown_metrics(),
            tokens_per_second=meter.speed("tokens") if stage.tokens.lifetime else None,
        )

    def _eta(self, done: int, total: int | None, epoch: int | None, rate: float | None) -> float | None:
        """Seconds left at ``rate`` batches/s: of the fit's train batches, or of an evaluation epoch."""
        if total is None or not rate:
            return None
        remaining = max(total - done, 0)
        if self._stage == "train":
            if self._max_epochs is None or epoch is None:
                return None
            remaining += max(self._max_epochs - epoch, 0) * total
        return remaining / rate

    def _shown_metrics(self) -> tuple[tuple[str, str], ...]:
        if self._metrics is None or self._metrics_failed:
            return ()
        try:
            return tuple((str(key), format_metric(value)) for key, value in self._metrics(self._name).items())
        except Exception as error:  # a user's metric or transform must not stop the training
            self._metrics_failed = True
            warnings.warn(f"progress display: reading the metrics failed ({error!r}); none are shown", stacklevel=2)
            return ()

    def _switch(self, stage: str, name: str) -> None:
        """Line ``name`` runs from now: the last line's rates are measured up to now and its clock stops."""
        if name == self._name:
            return
        now = self._clock()
        if self._name:
            self._measure(now)
            self._meters[self._name].pause()
        self._name, self._stage = name, stage
        if name not in self._meters:
            self._meters[name] = Meter(self._clock, *self._counts())
        self._meters[name].resume()  # a new meter's clock runs already
        self._sample_due = 0.0

    def _show(self, now: float, *, final: bool = False) -> None:
        """Draw the line (``final``: kept on a terminal) or print it."""
        status = self._status()
        line = format_status(status)
        if self._live is None:
            write_line(self._stream, line)
            self._due = now + self._interval
        elif final:
            self._live.stop()
            self._live.print(line)
        else:
            self._live.show(line, status.batch, status.batches)
