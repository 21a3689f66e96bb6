"""Count optimizer steps through torch's own step hooks, whatever framework calls ``step()``; the steps AMP
skipped from the GradScaler's public scale."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from tracker_core.counting._stage import TrainStageProgress


def count_optimizer_steps(
    train: TrainStageProgress, optimizers: Sequence[torch.optim.Optimizer], first_index: int = 0
) -> list[RemovableHandle]:
    """Count each completed ``step()`` of ``optimizers[i]`` as a step of optimizer ``first_index + i`` (a step
    AMP skipped never reaches it: :func:`count_skipped_steps`). Remove the handles to stop counting."""
    return [
        optimizer.register_step_post_hook(_step_counter(train, first_index + offset))
        for offset, optimizer in enumerate(optimizers)
    ]


def _step_counter(train: TrainStageProgress, index: int) -> Callable[[Any, Any, Any], None]:
    """A step post-hook doing ``train.optimizer_step(index)``."""
    return lambda _optimizer, _args, _kwargs: train.optimizer_step(index)


def count_skipped_steps(
    train: TrainStageProgress, scaler: torch.amp.GradScaler, optimizers: Sequence[torch.optim.Optimizer]
) -> Callable[[], None]:
    """Count the steps of ``optimizers[i]`` that AMP's ``scaler`` skips as skipped steps of optimizer ``i``: returns
    the check to call once per batch, after ``scaler.update()``. ``update()`` lowers the scale only after a skipped
    step: a check that finds the scale lower than at the last check counts a skipped step for each optimizer that
    took no step since. Call again once the scaler was loaded."""
    last = (scaler.get_scale(), _steps_taken(train, len(optimizers)))

    def check() -> None:
        nonlocal last
        now = (scaler.get_scale(), _steps_taken(train, len(optimizers)))
        if now[0] < last[0]:
            for index, (taken, before) in enumerate(zip(now[1], last[1], strict=True)):
                if taken == before:
                    train.optimizer_step_skipped(index)
        last = now

    return check


def _steps_taken(train: TrainStageProgress, optimizers: int) -> list[int]:
    """The lifetime steps of optimizers ``0`` to ``optimizers - 1`` (0 before their first)."""
    tallies = train._optimizer_steps
    return [tallies[index].total if index < len(tallies) else 0 for index in range(optimizers)]
