"""Tokens of a batch, all and non-padding, by a user's function or read from the batch (docs/schema.md,
``tokens``). A mask's sum stays on its device until a count is read: a batch never waits for the accelerator."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from torch import Tensor

from tracker_core.counting._counts import Tally

if TYPE_CHECKING:
    from tracker_core.counting._stage import StageProgress

CountTokens = Callable[[Any], "int | tuple[int, int]"]
"""A user's token count of a batch: all tokens, or ``(tokens, non_padding_tokens)``."""


class _TokenTally(Tally):
    """A tally that can also hold a device tensor not yet read (sums of attention masks); reading
    ``total`` adds it in, writing ``total`` drops it."""

    __slots__ = ("_total", "pending")

    def __init__(self) -> None:
        self.pending: Tensor | None = None
        super().__init__()

    @property
    def total(self) -> int:
        pending = self.pending
        if pending is not None:
            self.pending = None
            self._total += int(pending)
        return self._total

    @total.setter
    def total(self, value: int) -> None:
        self._total = value
        self.pending = None

    def add_tensor(self, count: Tensor) -> None:
        """Add ``count`` (a 0-d tensor, on any device) without reading it."""
        pending = self.pending
        self.pending = count if pending is None else pending + count


class TokenCounter:
    """Counts the tokens of each processed batch of one stage: by ``count_tokens(batch)`` when given, else from its
    ``input_ids`` and ``attention_mask``. A batch type carrying neither is remembered: one type check each."""

    __slots__ = ("_count_tokens", "_stage", "_warned", "tokenless_type")

    def __init__(self, stage: StageProgress, count_tokens: CountTokens | None = None) -> None:
        self._stage = stage
        self._count_tokens = count_tokens
        self.tokenless_type: type | None = None  # a batch type without token tensors (never a mapping)
        self._warned = False

    def __call__(self, batch: object) -> None:
        """Count the tokens of ``batch``, a batch the stage processed."""
        if type(batch) is self.tokenless_type:
            return
        if self._count_tokens is not None:
            self._count_by_function(batch)
            return
        if type(batch) is dict or isinstance(batch, Mapping):
            ids, mask = batch.get("input_ids"), batch.get("attention_mask")
        else:
            ids, mask = getattr(batch, "input_ids", None), getattr(batch, "attention_mask", None)
        if type(ids) is not Tensor and type(mask) is not Tensor:
            if ids is None and mask is None and not isinstance(batch, Mapping):
                self.tokenless_type = type(batch)
            return
        stage = self._stage
        if type(mask) is Tensor:
            stage._tokens.total += ids.numel() if type(ids) is Tensor else mask.numel()
            stage._non_padding_tokens.add_tensor(mask.sum())
        else:  # ids is a tensor (one of the two is), mask is not
            tokens = ids.numel()  # type: ignore[union-attr]  # a Tensor (above); cast() would cost a call
            stage._tokens.total += tokens
            stage._non_padding_tokens.total += tokens

    def _count_by_function(self, batch: object) -> None:
        counted = self._count_tokens(batch)  # type: ignore[misc]
        tokens, non_padding = counted if isinstance(counted, tuple) else (counted, counted)
        try:
            self._stage.count_tokens(int(tokens), int(non_padding))  # a ValueError unless 0 <= non_padding <= tokens
        except (TypeError, ValueError):
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"count_tokens returned {counted!r} for a {self._stage.name} batch; expected tokens >= 0 or "
                    "(tokens, non_padding_tokens) with 0 <= non_padding_tokens <= tokens: such batches count no "
                    "tokens",
                    stacklevel=2,
                )
