"""Run a function in 2 real processes joined by a gloo process group on 127.0.0.1."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(rank: int, world: int, port: int, fn: Callable[[int], Any], results: Any) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        results[rank] = fn(rank)
    finally:
        dist.destroy_process_group()


def run_on_two_ranks(fn: Callable[[int], Any]) -> list[Any]:
    """``[fn(0), fn(1)]``, each computed in its own process of a 2-rank gloo group."""
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_entry, args=(2, _free_port(), fn, results), nprocs=2, join=True)
        return [results[0], results[1]]
