"""One reduce_state() of the full progress state vs one all_reduce of an int64 tensor of the same length.

Two real gloo processes on 127.0.0.1, calls interleaved in one run; prints the median
time of each and their ratio (target <= 1.2x: one collective, not one per counter), and
what reduce_state adds around the collective (packing the live counters into the tensor and
the result back into state_dict layout), timed without a process group.
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
from tracker_core._sync import _pack_counts

ROUNDS = 1000


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
    length = len(_pack_counts(progress))
    tensor = torch.zeros(length, dtype=torch.int64)
    synced, raw = [], []
    for _ in range(20):  # warm-up
        reduce_state(progress)
        dist.all_reduce(tensor)
    calls = [(synced, lambda: reduce_state(progress)), (raw, lambda: dist.all_reduce(tensor))]
    for round_ in range(ROUNDS):
        for times, call in calls if round_ % 2 else reversed(calls):  # alternate which goes first
            dist.barrier()
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
    if rank == 0:
        ratios = [s / r for s, r in zip(synced, raw)]
        results.update(length=length, synced=statistics.median(synced), raw=statistics.median(raw),
                       ratio=statistics.median(ratios))
    dist.destroy_process_group()


def _local_cost() -> float:
    """Seconds per reduce_state call without a process group: all it adds around the all_reduce."""
    progress = _progress()
    calls = 2000
    start = time.perf_counter()
    for _ in range(calls):
        reduce_state(progress)
    return (time.perf_counter() - start) / calls


def main() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with mp.Manager() as manager:
        results = manager.dict()
        mp.spawn(_worker, args=(port, results), nprocs=2, join=True)
        length, synced, raw, ratio = results["length"], results["synced"], results["raw"], results["ratio"]
    print(f"state length: {length} int64 counts, 2 gloo ranks, {ROUNDS} interleaved rounds (medians)")
    print(f"reduce_state(progress):             {synced * 1e3:.3f} ms")
    print(f"all_reduce(int64[{length}]) alone:     {raw * 1e3:.3f} ms")
    print(f"ratio: {ratio:.2f}x (median of the per-round ratios; of the medians {synced / raw:.2f}x)   "
          "target <= 1.2x")
    print(f"pack + unpack alone (no collective): {_local_cost() * 1e6:.1f} us per call")


if __name__ == "__main__":
    main()
