"""Count optimizer steps through torch's own step hooks, whatever framework calls ``step()``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from tracker_core.counting._stage import TrainStageProgress


def count_optimizer_steps(
    train: TrainStageProgress, optimizers: Sequence[torch.optim.Optimizer], first_index: int = 0
) -> list[RemovableHandle]:
    """Count each completed ``step()`` of ``optimizers[i]`` as a step of optimizer ``first_index + i``.

    A step that never reaches the optimizer (e.g. skipped by AMP's GradScaler) is not
    counted here; see :func:`count_skipped_steps`. Remove the returned handles to stop
    counting.
    """
    return [
        optimizer.register_step_post_hook(_step_counter(train, first_index + offset))
        for offset, optimizer in enumerate(optimizers)
    ]


def _step_counter(train: TrainStageProgress, index: int) -> Callable[[Any, Any, Any], None]:
    """A step post-hook doing ``train.optimizer_step(index)``."""

    def counted(_optimizer: Any, _args: Any, _kwargs: Any) -> None:
        train.optimizer_step(index)

    return counted


def count_skipped_steps(
    train: TrainStageProgress,
    scaler: torch.amp.GradScaler,
    optimizers: Sequence[torch.optim.Optimizer],
    first_index: int = 0,
) -> None:
    """Report each ``scaler.step(optimizers[i])`` that AMP skipped (inf/NaN gradients) as a
    skipped step of optimizer ``first_index + i``.

    Wraps ``scaler.step`` on this instance (again for each call, so optimizers hooked later
    share the scaler): a call after which the optimizer did not step is a skipped step.
    Steps that do happen are counted by ``count_optimizer_steps``.
    """
    indices = {id(optimizer): first_index + offset for offset, optimizer in enumerate(optimizers)}
    step = scaler.step

    def step_counting_skips(optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        stepped = False

        def _stepped(_opt: torch.optim.Optimizer, _args: Any, _kwargs: Any) -> None:
            nonlocal stepped
            stepped = True

        handle = optimizer.register_step_post_hook(_stepped)
        try:
            result = step(optimizer, *args, **kwargs)
        finally:
            handle.remove()
        if not stepped and scaler.is_enabled() and id(optimizer) in indices:
            train.optimizer_step_skipped(indices[id(optimizer)])
        return result

    scaler.step = step_counting_skips  # type: ignore[method-assign]
