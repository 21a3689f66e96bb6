"""Drive one stage of the core model from Lightning's hooks, in step with Lightning's own counters: a phase
Lightning marks *after* a hook is marked at the next hook (docs/lightning.md, "What is counted at which hook")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tracker_core import StageProgress
from tracker_core.adapter import TokenCounter


class StageDriver:
    """Lazy phase marks of one stage: what Lightning has marked after the last hook ran."""

    __slots__ = (
        "batch",
        "batch_to_complete",
        "batch_to_start",
        "epoch_to_complete",
        "epoch_to_open",
        "epoch_to_start",
        "stage",
        "tokens",
    )

    def __init__(
        self, stage: StageProgress, count_tokens: Callable[[Any], int | tuple[int, int]] | None = None
    ) -> None:
        self.stage = stage
        self.tokens = TokenCounter(stage, count_tokens)
        self.batch: Any = None  # the batch in flight (its tokens are counted when it is processed)
        self.reset()

    def reset(self) -> None:
        """Forget pending marks (after a checkpoint was loaded into the stage)."""
        self.batch_to_start = False  # Lightning marks it started when its step begins (the callback's on_before_*)
        self.batch_to_complete = self.epoch_to_start = self.epoch_to_complete = False
        self.epoch_to_open = False  # an epoch begins without its start hook (see ProgressTracker)

    def close_epoch(self) -> None:
        """Count the epoch in flight as finished without its end hooks; the next one begins without its start
        hooks (as Lightning closes a restored epoch)."""
        if self.stage.view.epochs.lifetime.in_flight:
            self.stage.epoch_processed()
            self.stage.epoch_completed()
            self.epoch_to_open = True

    def settle(self) -> None:
        """Mark what Lightning marked after the previous hook: completions and starts."""
        if self.batch_to_complete:
            self.batch_to_complete = False
            self.stage.batch_completed()
        if self.epoch_to_start:
            self.epoch_to_start = False
            self.stage.epoch_started()
        if self.epoch_to_complete:
            self.epoch_to_complete = False
            self.stage.epoch_completed()

    def epoch_begin(self) -> None:
        self.settle()
        self.epoch_to_open = False
        self.stage.epoch_ready()
        self.epoch_to_start = True

    def batch_begin(self, batch: Any) -> None:
        if self.epoch_to_start or self.epoch_to_open or (self.batch_to_complete and self.epoch_to_complete):
            if self.epoch_to_open:  # the epoch begins here, without its start hooks
                self.epoch_begin()
            self.settle()
            self.stage.batch_ready()
        elif self.batch_to_complete:  # only the previous batch ended (every batch): one core call
            self.batch_to_complete = False
            self.stage.batch_next()
        else:
            self.stage.batch_ready()
        self.batch_to_start = True
        self.batch = batch

    def batch_end(self, dataloader: int = 0, used: Any = None) -> None:
        """The batch's step is done; idempotent (a checkpoint may have caught it up already). Its samples are counted
        from ``used`` when given: the batch ``training_step(dataloader_iter)`` fetched, or a combined batch's part."""
        if self.batch_to_complete:
            return
        if self.batch_to_start:
            self.batch_to_start = False
            self.stage.batch_started()
        batch, self.batch = self.batch, None
        self.stage.batch_processed_of(batch if used is None else used, dataloader)
        self.batch_to_complete = True
        if type(batch) is not self.tokens.tokenless_type:  # most batches: no call
            self.tokens(batch)

    def batch_of_none(self) -> None:
        """A train loader yielded None: Lightning marks that batch ready and processed without its start hook or a
        step, and runs its end hooks. Counted as a batch of no samples (so the loader's position counts it)."""
        self.batch_begin(None)
        self.batch_to_start = False
        self.stage.batch_started()
        self.stage.batch_processed_of(None)
        self.batch_to_complete = True

    def epoch_end(self) -> None:
        """All batches are done (or the epoch was cut short); idempotent like ``batch_end``."""
        if self.epoch_to_complete:
            return
        if self.batch_to_start:  # fetched but never run: on_train_batch_start returned -1
            self.batch_to_start = False
            self.stage.cancel_batch()
        self.settle()
        self.stage.epoch_processed()
        self.epoch_to_complete = True
