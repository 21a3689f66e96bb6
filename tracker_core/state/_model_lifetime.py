"""The progress state in a persistent buffer of the model (docs/resume.md, "A lifetime that lives in the model")."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import torch

from tracker_core._errors import ProgressStateError
from tracker_core.counting._progress import Progress
from tracker_core.state._codec import bytes_to_tensor, tensor_to_bytes

BUFFER = "tracker_core_lifetime"  # the buffer's name in ``model.state_dict()``, after its parents' prefix

_BINDINGS = "_tracker_core_lifetime_progress"  # the model attribute holding the bound progress (a 1-list)


def track_lifetime(model: torch.nn.Module) -> None:
    """Opt ``model`` in: its saved weights carry the lifetime progress of the runs that train it. Idempotent; call
    it before loading weights into the model (their buffer then loads too) and before training (docs/resume.md)."""
    if is_tracked(model):
        return
    model.register_buffer(BUFFER, torch.empty(0, dtype=torch.uint8), persistent=True)
    setattr(model, _BINDINGS, [])
    model.register_state_dict_pre_hook(_refresh)  # type: ignore[no-untyped-call]
    model.register_load_state_dict_pre_hook(_fit_incoming)  # type: ignore[no-untyped-call]


def is_tracked(model: torch.nn.Module) -> bool:
    """Whether :func:`track_lifetime` was called on ``model``."""
    return BUFFER in dict(model.named_buffers(recurse=False))


def bind_lifetime(model: torch.nn.Module, progress: Progress) -> bool:
    """Before a run on ``model``: its tracked modules save ``progress`` from now on, which continues the furthest
    lifetime their buffers hold if ahead (then True; docs/adapters.md); a damaged buffer raises before any binding."""
    tracked = [module for module in model.modules() if is_tracked(module)]
    saved = [read_lifetime(getattr(module, BUFFER), BUFFER) for module in tracked]
    for module in tracked:
        getattr(module, _BINDINGS)[:] = [progress]
    furthest = max((state for state in saved if state is not None), key=train_batches, default=None)
    if furthest is None or train_batches(furthest) <= progress.view.train.batches.lifetime.completed:
        return False
    progress.load_lifetime(furthest)
    return True


def read_lifetime(buffer: object, key: str) -> dict[str, Any] | None:
    """The progress state a lifetime buffer holds (None if empty); ``ProgressStateError`` naming ``key`` if damaged."""
    if not isinstance(buffer, torch.Tensor) or buffer.dtype != torch.uint8 or buffer.dim() != 1:
        raise ProgressStateError(key, "expected a 1-d uint8 tensor holding the progress as JSON")
    if buffer.numel() == 0:
        return None
    try:
        state = json.loads(tensor_to_bytes(buffer).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise ProgressStateError(key, f"not the JSON of a progress state ({error})") from None
    Progress().load_state_dict(state)  # validates fully; raises ProgressStateError naming the key
    return state  # type: ignore[no-any-return]


def lifetimes_in(weights: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The lifetime progress states ``weights`` (a ``state_dict()``, or a safetensors file's tensors) carry by buffer
    name, e.g. ``{"net.tracker_core_lifetime": state}``, empty buffers left out; a damaged one raises naming it."""
    # only the buffers are read: ``weights`` may load each tensor when asked for it
    states = {name: read_lifetime(weights[name], name) for name in weights if name.rpartition(".")[2] == BUFFER}
    return {name: state for name, state in states.items() if state is not None}


def without_lifetime(weights: Mapping[str, Any]) -> dict[str, Any]:
    """``weights`` without the lifetime buffers, for a model that did not opt in (strict loading works)."""
    return {name: value for name, value in weights.items() if name.rpartition(".")[2] != BUFFER}


def train_batches(state: Mapping[str, Any]) -> int:
    """The lifetime's completed train batches: the furthest lifetime has the most."""
    return int(state["stages"]["train"]["batches"]["lifetime"]["completed"])


def _refresh(module: torch.nn.Module, prefix: str, keep_vars: bool) -> None:
    """Before ``state_dict``: write the bound progress into the buffer (nothing bound: keep what it holds)."""
    bindings: list[Progress] = getattr(module, _BINDINGS)
    if bindings:
        data = json.dumps(bindings[0].state_dict(), separators=(",", ":")).encode("utf-8")
        setattr(module, BUFFER, bytes_to_tensor(data))


def _fit_incoming(module: torch.nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """Before ``load_state_dict``: size the buffer like the incoming one, so loading copies it whatever its length."""
    incoming = state_dict.get(prefix + BUFFER)
    if isinstance(incoming, torch.Tensor) and incoming.dtype == torch.uint8 and incoming.dim() == 1:
        setattr(module, BUFFER, torch.empty_like(incoming, device=getattr(module, BUFFER).device))
