"""Reading batches again to reach a resume position, where nothing can position the loader without it: said."""

from __future__ import annotations

import warnings
from typing import Any

from torch.utils.data import DataLoader


class SlowResumeWarning(UserWarning):
    """A resume reads again batches already trained to reach its position; the message says how many and why."""


def describe(loader: DataLoader[Any]) -> str:
    """``"DataLoader over Stream (2 workers)"``: how a warning names a loader."""
    workers = loader.num_workers
    return f"{type(loader).__name__} over {type(loader.dataset).__name__} ({workers} worker{'s' * (workers != 1)})"


def warn_reading_again(loader: DataLoader[Any], batches: int) -> None:
    """A resume of a loader over a dataset without a state of its own reads ``batches`` batches again."""
    warnings.warn(
        f"resuming {describe(loader)}: reading again the {batches} batches already trained to reach the saved "
        "position, because its dataset has no state of its own (state_dict / load_state_dict): the loader reads it "
        "again",
        SlowResumeWarning,
        stacklevel=1,
    )
