"""Every rank's object on the writer, at a cost per rank that does not grow with the number of ranks (unlike
``gather_object``, which all-gathers every object's size first)."""

from __future__ import annotations

import pickle
import struct
from typing import Any

import torch
import torch.distributed as dist

from tracker_core.distributed._collective import run_collective

_LENGTH = struct.Struct("<q")
_WRITER = 0  # the rank that writes the checkpoint file (Lightning's and Ignite's rank 0)


def gather_to_writer(obj: Any | None) -> list[Any] | None:
    """Collective (every rank calls it, with None when it has nothing to send): on the writer (rank 0) every
    rank's ``obj``, index = rank; elsewhere None. Each pickle is padded to the longest, found by one ``all_reduce``."""
    if not (dist.is_available() and dist.is_initialized()):
        return None if obj is None else [obj]
    data = b"" if obj is None else pickle.dumps(obj)
    # Collectives take tensors on the current GPU under NCCL alone, else on the CPU.
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
    longest = torch.tensor([len(data)], dtype=torch.int64, device=device)
    run_collective(lambda: dist.all_reduce(longest, op=dist.ReduceOp.MAX), [longest])
    size = int(longest.item())
    if size == 0:
        return None
    framed = bytearray(_LENGTH.size + size)
    _LENGTH.pack_into(framed, 0, len(data))
    framed[_LENGTH.size : _LENGTH.size + len(data)] = data
    mine = torch.frombuffer(framed, dtype=torch.uint8).to(device)
    received = [torch.empty_like(mine) for _ in range(dist.get_world_size())] if dist.get_rank() == _WRITER else None
    run_collective(lambda: dist.gather(mine, received, dst=_WRITER), [mine, *(received or [])])
    if received is None:
        return None
    objects: list[Any] = []
    for tensor in received:
        raw = bytearray(tensor.numel())
        torch.frombuffer(raw, dtype=torch.uint8).copy_(tensor)  # no NumPy needed (a core-only install)
        (length,) = _LENGTH.unpack_from(raw)
        objects.append(pickle.loads(raw[_LENGTH.size : _LENGTH.size + length]) if length else None)  # this job's ranks
    return objects
