"""The Ignite display handler: the shared live display, fed by the view of the engine's ProgressHandler."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Literal, TextIO

import ignite.distributed as idist
from ignite.engine import Engine, Events

from tracker_core import ProgressView, get_progress
from tracker_core.adapter import Display

MetricNames = Sequence[str] | Literal["all"] | None
Shown = Callable[[], dict[str, object]]


class ProgressDisplay:
    """Shows the stage, epoch, batch, steps, samples/s and ETA of engines a ProgressHandler records, and the engine's
    output and metrics as Ignite's ``ProgressBar`` does (docs/display.md): a live line on a terminal (rich), elsewhere
    a line every ``interval`` seconds and at each epoch end, to ``stream`` (default: standard output); rank 0 only."""

    def __init__(self, stream: TextIO | None = None, terminal: bool | None = None, interval: float = 10.0) -> None:
        self._new_display = partial(Display, stream=stream, terminal=terminal, interval=interval)
        self._view: ProgressView | None = None
        self._display: Display | None = None
        self._sources: dict[str, Shown] = {}  # line name -> what the engine running under it now shows

    def attach(
        self,
        engine: Engine,
        name: str | None = None,
        metric_names: MetricNames = None,
        output_transform: Callable[[Any], Any] | None = None,
    ) -> None:
        """Show ``engine``'s epochs and batches: attach its ProgressHandler before, and the metrics (docs/display.md).
        ``name``: the line's name (default: the engine's stage), e.g. ``"train-eval"``. As in Ignite's ``ProgressBar``,
        ``metric_names``: names in ``engine.state.metrics`` to show, or ``"all"``; ``output_transform``: turns
        ``engine.state.output`` into a number (shown as ``output``) or a dict of them to show."""
        try:
            view = get_progress(engine)
        except LookupError:
            raise ValueError(
                "attach a tracker_core.integrations.ignite.ProgressHandler to this engine before the ProgressDisplay: "
                "the display shows the progress it records"
            ) from None
        if self._view is not None and view is not self._view:
            raise ValueError("this ProgressDisplay already shows another ProgressHandler's progress")
        self._view = view
        if idist.get_rank() != 0:
            return
        if self._display is None:
            self._display = self._new_display(view, metrics=self._metrics)
        self._show(engine, view, self._display, name, _source(engine, metric_names, output_transform))

    def _metrics(self, name: str) -> dict[str, object]:
        source = self._sources.get(name)
        return {} if source is None else source()

    def _show(self, engine: Engine, view: ProgressView, display: Display, name: str | None, source: Shown) -> None:
        """Register the display's handlers on ``engine``; its stage is read from the view at each epoch's first batch.
        A train epoch's line comes as its last batch completes (before the evaluations its EPOCH_COMPLETED runs)."""
        sources = self._sources
        stage = ""  # the stage this engine's running epoch counts as
        shown = False  # this epoch's final line was written

        def epoch_started() -> None:
            nonlocal stage, shown
            stage, shown = "", False

        def iteration_completed(engine: Engine) -> None:  # the engine as Ignite's argument: none held here
            nonlocal stage, shown
            state = engine.state
            if not stage:
                where = view.where
                stage = where.stage if where is not None else ""
                sources[name or stage] = source
                display.set_batches(name or stage, state.epoch_length)  # None until Ignite has seen an iterable's end
                if stage == "train":  # Ignite counts epochs over resumed runs, the display within this run
                    most = state.max_epochs
                    display.set_max_epochs(None if most is None else most - state.epoch + view.train.epochs.run.ready)
            display.update(stage, name)
            length = state.epoch_length
            if stage == "train" and length is not None and view.train.batches.epoch.completed >= length:
                display.epoch_end(stage, name)
                shown = True

        def epoch_completed() -> None:
            if stage and not shown:
                display.epoch_end(stage, name)

        engine.add_event_handler(Events.EPOCH_STARTED, epoch_started)
        engine.add_event_handler(Events.ITERATION_COMPLETED, iteration_completed)
        engine.add_event_handler(Events.EPOCH_COMPLETED, epoch_completed)
        engine.add_event_handler(Events.COMPLETED, display.close)
        engine.add_event_handler(Events.TERMINATE, display.close)


def _source(engine: Engine, metric_names: MetricNames, output_transform: Callable[[Any], Any] | None) -> Shown:
    """What ``engine`` shows beside its counts: its transformed output, then the metrics named."""
    held = weakref.ref(engine)  # an engine the user drops is freed at once

    def shown() -> dict[str, object]:
        engine = held()
        if engine is None:
            return {}
        state = engine.state
        shown: dict[str, object] = {}
        if output_transform is not None and state.output is not None:
            output = output_transform(state.output)
            shown.update(output if isinstance(output, Mapping) else {"output": output})
        metrics = state.metrics
        names = list(metrics) if metric_names == "all" else list(metric_names or ())
        shown.update((name, metrics[name]) for name in names if name in metrics)
        return shown

    return shown
