"""One reduce_state() of the full progress state vs one all_reduce of an int64 tensor of the same length.

Two real gloo processes on 127.0.0.1, calls interleaved in one run; prints the median
time of each and their ratio (target <= 1.5x: one collective, not one per counter), and
what reduce_state adds around the collective (packing the live counters into the tensor and
the result back into state_dict layout, both walks over the schema's one declaration), timed
without a process group and step by step right after a barrier (where Python runs several
times slower than in a warm loop).
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
from tracker_core.distributed._sync import _buffer
from tracker_core.state._schema import pack, unpack

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
    length = len(pack(progress))
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
    steps = _steps_after_a_barrier(progress)
    if rank == 0:
        ratios = [s / r for s, r in zip(synced, raw)]
        results.update(
            length=length,
            synced=statistics.median(synced),
            raw=statistics.median(raw),
            ratio=statistics.median(ratios),
            steps=steps,
        )
    dist.destroy_process_group()


def _steps_after_a_barrier(progress: Progress) -> dict[str, float]:
    """Median seconds of each step of reduce_state, each call right after a barrier (as above)."""
    times: dict[str, list[float]] = {"pack": [], "into buffer": [], "all_reduce": [], "out of buffer": [], "unpack": []}
    for _ in range(ROUNDS // 2):
        dist.barrier()
        marks = [time.perf_counter()]
        counts = pack(progress)
        marks.append(time.perf_counter())
        values, tensor, struct = _buffer(len(counts))
        struct.pack_into(values, 0, *counts)
        marks.append(time.perf_counter())
        dist.all_reduce(tensor)
        marks.append(time.perf_counter())
        reduced = struct.unpack_from(values)
        marks.append(time.perf_counter())
        unpack(progress, reduced)
        marks.append(time.perf_counter())
        for (_, spent), start, end in zip(times.items(), marks, marks[1:]):
            spent.append(end - start)
    return {name: statistics.median(spent) for name, spent in times.items()}


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
        step_times = dict(results["steps"])
    print(f"state length: {length} int64 counts, 2 gloo ranks, {ROUNDS} interleaved rounds (medians)")
    print(f"reduce_state(progress):             {synced * 1e3:.3f} ms")
    print(f"all_reduce(int64[{length}]) alone:     {raw * 1e3:.3f} ms")
    print(f"ratio: {ratio:.2f}x (median of the per-round ratios; of the medians {synced / raw:.2f}x)   target <= 1.5x")
    print(f"pack + unpack alone (no collective): {_local_cost() * 1e6:.1f} us per call")
    steps = ", ".join(f"{name} {spent * 1e6:.0f} us" for name, spent in step_times.items())
    print(f"its steps right after a barrier (medians): {steps}")


if __name__ == "__main__":
    main()
