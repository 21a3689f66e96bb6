"""The Lightning progress bar: the shared live display, fed by ``tracker_core.get_progress(trainer)``."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, TextIO

from tracker_core import get_progress
from tracker_core.adapter import Display
from tracker_core.integrations.lightning._bases import ProgressBarBase

if TYPE_CHECKING:
    import pytorch_lightning as pl


class ProgressDisplay(ProgressBarBase):
    """Lightning's progress bar: the live display of the ``ProgressTracker`` among the callbacks (one is added at
    setup when there is none), then ``get_metrics`` as Lightning's own bars. On a terminal a live line; elsewhere a
    line every ``interval`` seconds and at each epoch end, to ``stream`` (default stdout). docs/display.md."""

    def __init__(self, stream: TextIO | None = None, terminal: bool | None = None, interval: float = 10.0) -> None:
        super().__init__()
        self._stream = stream
        self._terminal = terminal
        self._interval = interval
        self._enabled = True
        self._display: Display | None = None
        self._train_line_shown = False  # this train epoch's line came before its validation

    @property
    def is_enabled(self) -> bool:
        """Read by ``LightningModule.print`` (Lightning's bars have it; the base class has not)."""
        return self._enabled

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def print(self, *args: Any, sep: str = " ", **kwargs: Any) -> None:
        if self._display is None:
            print(*args, sep=sep, **kwargs)
        else:
            self._display.write(sep.join(map(str, args)))

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        _run_after_the_tracker(trainer, pl_module, stage, self)
        self._display = None  # made anew for this trainer's progress at first use

    def _shown(self, trainer: pl.Trainer) -> Display | None:
        """The display, made on first use (the tracker's setup has attached the progress by then)."""
        if not self._enabled:
            return None
        if self._display is None:
            self._display = Display(
                get_progress(trainer),
                stream=self._stream,
                terminal=self._terminal,
                interval=self._interval,
                metrics=lambda name: self.get_metrics(trainer, trainer.lightning_module),
            )
        return self._display

    def _update(self, stage: str) -> None:
        if self._enabled and self._display is not None:
            self._display.update(stage)

    def _close(self) -> None:
        if self._display is not None:
            self._display.close()

    # train ------------------------------------------------------------------------------
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._train_totals(trainer)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._train_line_shown = False
        self._train_totals(trainer)
        self._update("train")

    def _train_totals(self, trainer: pl.Trainer) -> None:
        display = self._shown(trainer)
        if display is not None:
            max_epochs = trainer.max_epochs
            if max_epochs is None or max_epochs < 0:
                display.set_max_epochs(None)
            else:  # Lightning counts epochs over resumed fits, the display within this run
                done_in_run = get_progress(trainer).train.epochs.run.completed
                display.set_max_epochs(max_epochs - trainer.current_epoch + done_in_run)
            display.set_batches("train", _known(self.total_train_batches))

    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._update("train")

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._enabled and self._display is not None and not self._train_line_shown:
            self._display.epoch_end("train")

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._close()

    # validate / test / predict -------------------------------------------------------------
    def _evaluation_start(self, trainer: pl.Trainer, stage: str, batches: list[int | float]) -> None:
        display = self._shown(trainer)
        if display is not None:
            display.set_batches(stage, _known(sum(batches)))
            display.update(stage)

    def _evaluation_end(self, trainer: pl.Trainer, stage: str) -> None:
        """The evaluation's line, at its end hook: Lightning has computed its epoch metrics by then."""
        if self._enabled and self._display is not None:
            self._display.epoch_end(stage)
            if trainer.state.fn != "fit":
                self._display.close()

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """A validation that ends the train epoch: the train epoch's line first."""
        if trainer.sanity_checking or trainer.state.fn != "fit" or not trainer.is_last_batch:
            return
        if self._enabled and self._display is not None and not self._train_line_shown:
            self._display.epoch_end("train")
            self._train_line_shown = True

    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._evaluation_start(trainer, "validate", trainer.num_val_batches)

    def on_validation_batch_end(self, trainer: pl.Trainer, *args: Any, **kwargs: Any) -> None:
        if not trainer.sanity_checking:
            self._update("validate")

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._evaluation_end(trainer, "validate")

    def on_test_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._evaluation_start(trainer, "test", trainer.num_test_batches)

    def on_test_batch_end(self, trainer: pl.Trainer, *args: Any, **kwargs: Any) -> None:
        self._update("test")

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._evaluation_end(trainer, "test")

    def on_predict_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._evaluation_start(trainer, "predict", trainer.num_predict_batches)

    def on_predict_batch_end(self, trainer: pl.Trainer, *args: Any, **kwargs: Any) -> None:
        self._update("predict")

    def on_predict_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._evaluation_end(trainer, "predict")

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._close()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._close()


def _known(batches: int | float) -> int | None:
    """Lightning's batch total, or None when it is infinite (an iterable without length)."""
    return None if math.isinf(batches) else int(batches)


def _run_after_the_tracker(trainer: Any, pl_module: Any, stage: str, bar: ProgressDisplay) -> None:
    """Put ``bar`` right after the ProgressTracker, or add one right before it, set up now (Lightning restores callback
    states after setup); in a new list: Lightning is iterating ``trainer.callbacks`` to call ``setup``."""
    from tracker_core.integrations.lightning import ProgressTracker

    callbacks = list(trainer.callbacks)
    trackers = [i for i, callback in enumerate(callbacks) if isinstance(callback, ProgressTracker)]
    if not trackers:
        tracker = ProgressTracker()
        callbacks.insert(callbacks.index(bar), tracker)
        trainer.callbacks = callbacks
        tracker.setup(trainer, pl_module, stage)
        return
    if callbacks.index(bar) < trackers[0]:
        callbacks.remove(bar)
        callbacks.insert(trackers[0], bar)  # the tracker moved up by one: this is right after it
        trainer.callbacks = callbacks
