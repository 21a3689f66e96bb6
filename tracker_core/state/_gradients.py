"""Partial gradients of an unfinished accumulation window: tensors, saved in the framework checkpoint beside the
progress entry."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch

from tracker_core._errors import ProgressStateError


def capture_gradients(parameters: Iterable[torch.nn.Parameter]) -> list[torch.Tensor | None]:
    """A copy of each parameter's ``.grad`` (None where it has none)."""
    return [None if p.grad is None else p.grad.detach().clone() for p in parameters]


def restore_gradients(
    parameters: Iterable[torch.nn.Parameter],
    saved: Sequence[torch.Tensor | None],
    then: Callable[[], object] | None = None,
) -> None:
    """Put saved gradients back; validate all first (``ProgressStateError`` names the index), then set. ``then``:
    called next (the progress's load), and if it raises, the gradients from before are put back."""
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
    previous = capture_gradients(params) if then is not None else []
    _set(params, saved)
    if then is not None:
        try:
            then()
        except BaseException:
            _set(params, previous)
            raise


def _set(params: list[torch.nn.Parameter], gradients: Sequence[torch.Tensor | None]) -> None:
    for param, grad in zip(params, gradients, strict=True):
        param.grad = None if grad is None else grad.detach().clone().to(param.device)
