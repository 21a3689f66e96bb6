"""One reduce_state() of the full progress state vs one all_reduce of an int64 tensor of the same length.

Two real gloo processes on 127.0.0.1, calls interleaved in one run; prints the median
time of each and their ratio (target <= 1.2x: one collective, not one per counter).
Run: .venv/bin/python benchmarks/sync.py
"""

from __future__ import annotations

import os
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tracker_core import Progress, reduce_state
from tracker_core._sync import _pack

ROUNDS = 300


def _progress() -> Progress:
    progress = Progress()
    progress.run_ready("fit")
    progress.run_started()
    for stage in (progress.train, progress.validate):
        stage.epoch_ready()
        stage.epoch_started()
        for dataloader in (0, 1):
            stage.batch_ready()
            stage.batch_started()
            stage.batch_processed(4, dataloader)
            stage.batch_completed()
    progress.train.optimizer_step(1)
    return progress


def _worker(rank: int, port: int, results: dict[str, float]) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    progress = _progress()
    length = _pack(progress)[1].numel()
    tensor = torch.zeros(length, dtype=torch.int64)
    synced, raw = [], []
    for _ in range(20):  # warm-up
        reduce_state(progress)
        dist.all_reduce(tensor)
    for _ in range(ROUNDS):
        dist.barrier()
        start = time.perf_counter()
        reduce_state(progress)
        synced.append(time.perf_counter() - start)
        dist.barrier()
        start = time.perf_counter()
        dist.all_reduce(tensor)
        raw.append(time.perf_counter() - start)
    if rank == 0:
        results.update(length=length, synced=statistics.median(synced), raw=statistics.median(raw))
    dist.destroy_process_group()


def main() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_worker, args=(port, results), nprocs=2, join=True)
        length, synced, raw = results["length"], results["synced"], results["raw"]
    print(f"state length: {length} int64 counts, 2 gloo ranks, {ROUNDS} interleaved rounds (medians)")
    print(f"reduce_state(progress):             {synced * 1e3:.3f} ms")
    print(f"all_reduce(int64[{length}]) alone:     {raw * 1e3:.3f} ms")
    print(f"ratio: {synced / raw:.2f}x   target <= 1.2x")


if __name__ == "__main__":
    main()
