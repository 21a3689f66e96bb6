"""Reading batches again to reach a resume position, where nothing can position the loader without it."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch.utils.data import DataLoader

from tracker_core.counting import _clock
from tracker_core.data._epoch import Cursor, FastForward


class SlowResumeWarning(UserWarning):
    """A resume reads again batches already trained to reach its position; the message says how many and why."""


def describe(loader: DataLoader[Any]) -> str:
    """``"DataLoader over Stream (2 workers)"``: how a warning names a loader."""
    workers = loader.num_workers
    return f"{type(loader).__name__} over {type(loader.dataset).__name__} ({workers} worker{'s' * (workers != 1)})"


@contextmanager
def reading_again(cursor: Cursor, loader: DataLoader[Any], batches: int, why: str) -> Iterator[None]:
    """Warn (before it starts) that the block reads ``batches`` batches again, and time it into
    ``cursor.fast_forward`` (and tell ``cursor.on_fast_forward`` the seconds: the progress records them);
    with no batch to read, clear it and only run the block."""
    cursor.fast_forward = None
    if batches <= 0:
        yield
        return
    warnings.warn(
        f"resuming {describe(loader)}: reading again the {batches} batches already trained to reach "
        f"the saved position, because {why}",
        SlowResumeWarning,
        stacklevel=1,
    )
    began, began_us = time.perf_counter(), _clock.now_us()
    yield
    cursor.fast_forward = FastForward(batches, time.perf_counter() - began)
    if cursor.on_fast_forward is not None:  # the progress's time, on the clock of all its times
        cursor.on_fast_forward((_clock.now_us() - began_us) / 1e6)
