"""Partial gradients of an unfinished accumulation window: tensors, saved in the framework checkpoint beside the
progress entry."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

from tracker_core._errors import ProgressStateError


def capture_gradients(parameters: Iterable[torch.nn.Parameter]) -> list[torch.Tensor | None]:
    """A copy of each parameter's ``.grad`` (None where it has none)."""
    return [None if p.grad is None else p.grad.detach().clone() for p in parameters]


def restore_gradients(parameters: Iterable[torch.nn.Parameter], saved: Sequence[torch.Tensor | None]) -> None:
    """Put saved gradients back; validate all first (``ProgressStateError`` names the index), then set."""
    params = list(parameters)
    if not isinstance(saved, (list, tuple)):
        raise ProgressStateError("gradients", f"expected a list, got {type(saved).__name__}")
    if len(saved) != len(params):
        raise ProgressStateError("gradients", f"{len(saved)} gradients for {len(params)} parameters")
    for index, (param, grad) in enumerate(zip(params, saved, strict=True)):
        if grad is None:
            continue
        if not isinstance(grad, torch.Tensor):
            raise ProgressStateError(f"gradients.{index}", f"expected a tensor or None, got {type(grad).__name__}")
        if grad.shape != param.shape or grad.dtype != param.dtype:
            raise ProgressStateError(
                f"gradients.{index}",
                f"shape {tuple(grad.shape)} {grad.dtype} does not fit the parameter's {tuple(param.shape)} {param.dtype}",
            )
    for param, grad in zip(params, saved, strict=True):
        param.grad = None if grad is None else grad.detach().clone().to(param.device)
