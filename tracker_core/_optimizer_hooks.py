"""Count optimizer steps through torch's own step hooks, whatever framework calls ``step()``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch.utils.hooks import RemovableHandle

from tracker_core._stage import TrainStageProgress


def count_optimizer_steps(
    train: TrainStageProgress, optimizers: Sequence[torch.optim.Optimizer]
) -> list[RemovableHandle]:
    """Count each completed ``step()`` of ``optimizers[i]`` as a step of optimizer ``i``.

    A step that never reaches the optimizer (e.g. skipped by AMP's GradScaler) is not
    counted here; the adapter reports it with ``optimizer_step_skipped``. Remove the
    returned handles to stop counting.
    """
    handles = []
    for index, optimizer in enumerate(optimizers):

        def _counted(_opt: torch.optim.Optimizer, _args: Any, _kwargs: Any, index: int = index) -> None:
            train.optimizer_step(index)

        handles.append(optimizer.register_step_post_hook(_counted))
    return handles
