"""Note the torch.distributed collectives a block calls and the bytes each rank hands them."""

from __future__ import annotations

import contextlib
import pickle
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

COLLECTIVES = ("gather", "all_reduce", "all_gather", "gather_object", "all_gather_object", "broadcast_object_list")


@contextlib.contextmanager
def collectives_noted() -> Iterator[list[tuple[str, int]]]:
    """Within the block, ``(name, bytes this rank hands it)`` for each collective called, in order."""
    sent: list[tuple[str, int]] = []
    originals = {name: getattr(dist, name) for name in COLLECTIVES}

    def spy(name: str) -> Any:
        collective = originals[name]

        def noted(obj: Any, *args: Any, **kwargs: Any) -> Any:
            size = obj.numel() * obj.element_size() if isinstance(obj, torch.Tensor) else len(pickle.dumps(obj))
            sent.append((name, size))
            return collective(obj, *args, **kwargs)

        return noted

    for name in originals:
        setattr(dist, name, spy(name))
    try:
        yield sent
    finally:
        for name, collective in originals.items():
            setattr(dist, name, collective)
