"""What counts the steps of an Accelerator's prepared objects: the optimizers' real steps (torch's step hooks), the
GradScaler's skipped steps and the schedulers' steps."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tracker_core import TrainStageProgress, count_optimizer_steps
from tracker_core.adapter import count_scheduler_steps, count_skipped_steps
from tracker_core.integrations.accelerate._compat import prepared_optimizers, prepared_schedulers


def hook_optimizers(accelerator: Any, train: TrainStageProgress, hooked: int) -> tuple[int, Callable[[], None]]:
    """Count real steps of the prepared optimizers after the first ``hooked``, on the torch optimizer inside each,
    and from now on (after a load_state restored them) every prepared scheduler's. Returns how many optimizers are
    hooked and the check of the steps the GradScaler skips, to call once per train batch."""
    inner = [getattr(prepared, "optimizer", prepared) for prepared in prepared_optimizers(accelerator)]
    count_optimizer_steps(train, inner[hooked:], first_index=hooked)
    scaler = accelerator.scaler
    check_skips = no_scaler if scaler is None else count_skipped_steps(train, scaler, inner)
    count_scheduler_steps(train, [getattr(s, "scheduler", s) for s in prepared_schedulers(accelerator)])
    return len(inner), check_skips


def no_scaler() -> None:
    """The skip check without a GradScaler: AMP skips no step."""
