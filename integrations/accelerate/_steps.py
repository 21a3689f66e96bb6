"""Counting the steps of an Accelerator's prepared optimizers, GradScaler and schedulers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tracker_core import TrainStageProgress, count_optimizer_steps
from tracker_core.adapter import count_scheduler_steps, count_skipped_steps
from tracker_core.integrations.accelerate._compat import prepared_optimizers, prepared_schedulers


def hook_optimizers(accelerator: Any, train: TrainStageProgress, hooked: int) -> tuple[int, Callable[[], None]]:
    """Count the real steps of the prepared optimizers after the first ``hooked``, and from now on every prepared
    scheduler's. Returns how many optimizers are hooked and the GradScaler's skip check, once per train batch."""
    inner = [getattr(prepared, "optimizer", prepared) for prepared in prepared_optimizers(accelerator)]
    count_optimizer_steps(train, inner[hooked:], first_index=hooked)
    scaler = accelerator.scaler
    check_skips = no_scaler if scaler is None else count_skipped_steps(train, scaler, inner)
    count_scheduler_steps(train, [getattr(s, "scheduler", s) for s in prepared_schedulers(accelerator)])
    return len(inner), check_skips


def no_scaler() -> None:
    """The skip check without a GradScaler: AMP skips no step."""
