"""What an open loop of AcceleratorProgress has in hand: the train batch in a loop body, the evaluation pass."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracker_core import StageProgress
from tracker_core.adapter import GlobalRng


@dataclass(slots=True)
class TrainBatch:
    """The batch of one train pass in a loop body (one object per pass, refilled for each batch)."""

    loader: int  # train dataloader index
    step: int = 0  # accelerator.step when it was fetched
    processed: bool = False  # a save_state in the loop body counted its step
    batch: Any = None  # the batch itself (its samples and tokens are counted when it is processed)


@dataclass(slots=True)
class Evaluation:
    """The open evaluation pass (one epoch of ``stage``)."""

    stage: StageProgress
    loader: int  # dataloader index
    own_run: bool  # a validate/test/predict run of its own, outside epochs()
    rng: GlobalRng  # the global RNGs when it began
    samples: int = -1  # of the batch in the loop body; -1: none
    batch: Any = None  # the batch in the loop body (its tokens are counted when it ends)
