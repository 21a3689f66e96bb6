"""The tracker's collectives return only once the process group's threads are done with the tensors they were given.

A collective's work keeps its tensors after the caller's wait returned, until a thread of the process group
(gloo's worker, NCCL's watchdog) drops the work. While C++ holds a tensor made in Python, torch keeps a
reference to its Python object, so that drop takes the GIL. A thread that takes the GIL while the interpreter
finalizes is ended by CPython (``pthread_exit``) inside the tensor's C++ destructor: ``std::terminate``
("terminate called without an active exception") and SIGABRT. This happened at the exit of a two-rank Ignite
run: its last collective was the tracker's (``check_divergence``, a checkpoint's gather), gloo's worker got no
CPU before the exit, and a DDP model in a reference cycle kept the process group, and its threads, past
Ignite's ``destroy_process_group()`` until the interpreter's last garbage collection.

:func:`run_collective` waits, with the GIL released, until C++ holds none of the tensors it handed over: its
hold shows as one reference to each tensor's Python object, dropped under the GIL. Nothing of the tracker's is
then left for a thread of the process group to free. It waits one second at most: a process group that keeps a
tensor longer is left to it, and training goes on.
"""

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
