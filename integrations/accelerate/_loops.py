"""What an open loop of AcceleratorProgress has in hand: the train batch in a loop body, the evaluation pass."""

from __future__ import annotations

import dis
import sys
from dataclasses import dataclass
from inspect import CO_GENERATOR
from types import CodeType
from typing import Any

from tracker_core.adapter import GlobalRng, StageProgress


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


# What the frame that drops a loop's generator runs when it leaves the loop in the normal flow: ``break`` and
# ``return`` pop the iterator (POP_TOP; POP_ITER from Python 3.14), ``del`` or a new value drop a held one.
# Unwinding an exception drops it at the instruction that raised instead.
_NORMAL_EXITS = frozenset(
    dis.opmap[name]
    for name in (
        "POP_TOP",
        "POP_ITER",
        "DELETE_FAST",
        "DELETE_NAME",
        "DELETE_GLOBAL",
        "DELETE_DEREF",
        "STORE_FAST",
        "STORE_FAST_STORE_FAST",
        "STORE_FAST_LOAD_FAST",
        "STORE_FAST_MAYBE_NULL",
        "STORE_NAME",
        "STORE_GLOBAL",
        "STORE_DEREF",
    )
    if name in dis.opmap
)


def iterating_code() -> CodeType:
    """Called in a generator: the code of the frame that resumed it (the loop over it)."""
    return sys._getframe(2).f_code


def closed_by_exception(iterated_by: CodeType | None) -> bool:
    """Called in a generator's ``GeneratorExit`` handler: True when the frame that closed it was unwinding an
    exception out of the loop body. CPython closes a loop's generator as that frame drops it: ``break`` and
    ``return`` at a pop, an exception at the instruction that raised; Python shows neither the exception nor its
    type there. That frame runs the loop's code (``iterated_by``, :func:`iterating_code`), or the loop is in a
    generator over this one (``tqdm(...)``) and it is the frame that dropped that generator. Closed by another
    frame (a held loop whose frame returned, the garbage collector) or by no Python frame: False. An explicit
    ``close()`` in the loop's frame reads as an exception."""
    try:
        frame = sys._getframe(2)
    except ValueError:
        return False
    if iterated_by is None or (frame.f_code is not iterated_by and not iterated_by.co_flags & CO_GENERATOR):
        return False
    code = frame.f_code.co_code
    return 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] not in _NORMAL_EXITS
