"""The Ignite display handler: the shared live display, fed by the view of the engine's ProgressHandler."""

from __future__ import annotations

from typing import TextIO

import ignite.distributed as idist
from ignite.engine import Engine, Events

from tracker_core import ProgressView, get_progress
from tracker_core.adapter import Display


class ProgressDisplay:
    """Shows the stage, epoch, batch, steps, samples/s and ETA of engines a ProgressHandler records.

    ::

        progress.attach(trainer, optimizers=[optimizer])  # ProgressHandler first
        progress.attach(evaluator, stage="validate")
        display = ProgressDisplay()
        display.attach(trainer)
        display.attach(evaluator)

    On a terminal it draws a live line (with rich); elsewhere it prints a line every
    ``interval`` seconds and at each epoch end, to ``stream`` (standard output by
    default). Only rank 0 shows anything.
    """

    def __init__(self, stream: TextIO | None = None, terminal: bool | None = None, interval: float = 10.0) -> None:
        self._stream = stream
        self._terminal = terminal
        self._interval = interval
        self._view: ProgressView | None = None
        self._display: Display | None = None

    def attach(self, engine: Engine) -> None:
        """Show ``engine``'s epochs and batches; a ProgressHandler must be attached to it already."""
        try:
            view = get_progress(engine)
        except LookupError:
            raise ValueError(
                "attach an tracker_core.integrations.ignite.ProgressHandler to this engine before the ProgressDisplay: "
                "the display shows the progress it records"
            ) from None
        if self._view is not None and view is not self._view:
            raise ValueError("this ProgressDisplay already shows another ProgressHandler's progress")
        self._view = view
        if idist.get_rank() != 0:
            return
        if self._display is None:
            self._display = Display(view, stream=self._stream, terminal=self._terminal, interval=self._interval)
        _show(engine, view, self._display)


def _show(engine: Engine, view: ProgressView, display: Display) -> None:
    """Register the display's handlers on ``engine``; its stage is read from the view at its first batch."""
    stage = [""]  # the stage this engine's running epoch counts as

    def epoch_started() -> None:
        stage[0] = ""

    def iteration_completed() -> None:
        if not stage[0]:
            where = view.where
            stage[0] = where.stage if where is not None else ""
            _set_totals(display, stage[0], engine, view)
        display.update(stage[0])

    def epoch_completed() -> None:
        if stage[0]:
            display.epoch_end(stage[0])

    engine.add_event_handler(Events.EPOCH_STARTED, epoch_started)
    engine.add_event_handler(Events.ITERATION_COMPLETED, iteration_completed)
    engine.add_event_handler(Events.EPOCH_COMPLETED, epoch_completed)
    engine.add_event_handler(Events.COMPLETED, display.close)
    engine.add_event_handler(Events.TERMINATE, display.close)


def _set_totals(display: Display, stage: str, engine: Engine, view: ProgressView) -> None:
    state = engine.state
    display.set_batches(stage, state.epoch_length)  # None until Ignite has seen an iterable's end
    if stage == "train":
        if state.max_epochs is None:
            display.set_max_epochs(None)
        else:  # Ignite counts epochs over resumed runs, the display within this run
            display.set_max_epochs(state.max_epochs - state.epoch + view.train.epochs.run.ready)
