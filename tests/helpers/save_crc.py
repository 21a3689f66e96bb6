"""CRC-32s of what a save holds, for the kill tests: each child logs them before a save, and the test
compares a folder's files (read with Accelerate's own file names) with the save its progress file names."""

from __future__ import annotations

import random
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

_RNG_KEYS = ("step", "random_state", "numpy_random_seed", "torch_manual_seed")  # of random_states_{rank}.pkl


def tensor_crc32(tensor: torch.Tensor, crc: int = 0) -> int:
    """CRC-32 of a tensor's bytes in memory order, continuing ``crc``."""
    flat = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
    return zlib.crc32(flat.numpy().tobytes(), crc)


def weights_crc32(state: Mapping[str, Any]) -> dict[str, int]:
    """Tensor name -> CRC-32 of each tensor of a model's state dict."""
    return {name: tensor_crc32(tensor) for name, tensor in state.items() if isinstance(tensor, torch.Tensor)}


def state_crc32(state: object) -> int:
    """CRC-32 of a nested state (an optimizer's ``state_dict()``): keys, plain values and tensor bytes, in order."""
    crc = 0
    stack: list[object] = [state]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            crc = tensor_crc32(item, zlib.crc32(f"T{item.dtype}{tuple(item.shape)}".encode(), crc))
        elif isinstance(item, np.ndarray):
            crc = zlib.crc32(item.tobytes(), zlib.crc32(f"A{item.dtype}{item.shape}".encode(), crc))
        elif isinstance(item, dict):
            crc = zlib.crc32(b"{", crc)
            for name in sorted(item, key=repr, reverse=True):
                stack.extend((item[name], f"K{name!r}"))
        elif isinstance(item, (list, tuple)):
            crc = zlib.crc32(b"[", crc)
            stack.extend(reversed(item))
        else:
            crc = zlib.crc32(repr(item).encode(), crc)
    return crc


def rng_crc32(states: Mapping[str, Any]) -> int:
    """CRC-32 of what a ``random_states_{rank}.pkl`` holds: Accelerate's step and the Python, NumPy, torch RNGs."""
    return state_crc32([states.get(key) for key in _RNG_KEYS])


def save_rng_crc32(step: int) -> int:
    """:func:`rng_crc32` of the file ``save_state`` is about to write (nothing draws in between)."""
    return rng_crc32(
        {
            "step": step,
            "random_state": random.getstate(),
            "numpy_random_seed": np.random.get_state(),
            "torch_manual_seed": torch.get_rng_state(),
        }
    )
