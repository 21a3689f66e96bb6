"""Counting the steps of an Accelerator's prepared optimizers, GradScaler and schedulers."""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from tracker_core import TrainStageProgress, count_optimizer_steps
from tracker_core.adapter import count_scheduler_steps, count_skipped_steps
from tracker_core.integrations.accelerate._compat import prepared_optimizers, prepared_schedulers


def hook_optimizers(
    accelerator: Any, train: TrainStageProgress, hooked: list[weakref.ref[Any]]
) -> tuple[list[weakref.ref[Any]], Callable[[], None]]:
    """Count the real steps of each prepared optimizer not in ``hooked`` (weak references to those hooked, by index:
    ``free_memory()`` empties Accelerate's list, and the next ``prepare()`` puts new ones there), and from now on
    every prepared scheduler's. Returns the hooked optimizers and the GradScaler's skip check, once per train batch."""
    inner = [getattr(prepared, "optimizer", prepared) for prepared in prepared_optimizers(accelerator)]
    for index, optimizer in enumerate(inner):
        if index >= len(hooked) or hooked[index]() is not optimizer:
            count_optimizer_steps(train, [optimizer], first_index=index)
    hooked = [weakref.ref(optimizer) for optimizer in inner]
    scaler = accelerator.scaler
    check_skips = no_scaler if scaler is None else count_skipped_steps(train, scaler, inner)
    count_scheduler_steps(train, [getattr(s, "scheduler", s) for s in prepared_schedulers(accelerator)])
    return hooked, check_skips


def no_scaler() -> None:
    """The skip check without a GradScaler: AMP skips no step."""
