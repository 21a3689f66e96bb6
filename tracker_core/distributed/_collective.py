"""The tracker's collectives return only once the process group's threads dropped the tensors they were given:
one dropped while the interpreter finalizes aborts the process (docs/design.md, "Distributed";
tests/test_two_rank_exits.py)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence

import torch

_PAUSE = 50e-6  # seconds between looks: the thread drops the work as soon as it gets the CPU and the GIL
_PATIENCE = 1.0  # seconds at most


def run_collective(collective: Callable[[], object], tensors: Sequence[torch.Tensor]) -> None:
    """Call ``collective`` (blocking, over ``tensors``), then wait until the process group holds none of ``tensors``."""
    before = _references(tensors)
    collective()
    deadline = time.monotonic() + _PATIENCE
    while any(now > then for now, then in zip(_references(tensors), before, strict=True)):
        if time.monotonic() > deadline:
            return
        time.sleep(_PAUSE)  # releases the GIL the thread needs to drop its hold


def _references(tensors: Sequence[torch.Tensor]) -> list[int]:
    return [sys.getrefcount(tensor) for tensor in tensors]
