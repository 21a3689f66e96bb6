"""Cost of one full train-batch event cycle and of state_dict(), against a bare int-increment loop.

Prints figures side by side from one run (timings here swing +-30%), plus callgrind
instruction counts per cycle when valgrind is installed (deterministic).
Targets (issue 2): cycle <= 1 us (~3,000 instructions), state_dict() <= 20 us.
Run: .venv/bin/python benchmarks/core_events.py
"""

from __future__ import annotations

import shutil
import statistics
import sys
import time

from tracker_core import Progress

INCREMENTS_PER_CYCLE = 9  # ready, started, processed, samples, 2 dataloader tallies, completed, step, step marker


def _progress_in_epoch() -> Progress:
    progress = Progress()
    progress.run_ready("fit")
    progress.run_started()
    progress.train.epoch_ready()
    progress.train.epoch_started()
    return progress


def tracked_cycles(n: int) -> float:
    train = _progress_in_epoch().train
    start = time.perf_counter()
    for _ in range(n):
        train.batch_ready()
        train.batch_started()
        train.optimizer_step()
        train.batch_processed(4)
        train.batch_completed()
    return time.perf_counter() - start


def bare_increments(n: int) -> float:
    a = b = c = d = e = f = g = h = i = 0
    start = time.perf_counter()
    for _ in range(n):
        a += 1
        b += 1
        c += 1
        d += 4
        e += 1
        f += 4
        g += 1
        h += 1
        i = c
    del a, b, d, e, f, g, h, i
    return time.perf_counter() - start


class _Empty:
    def mark(self) -> None:
        pass


def empty_calls(n: int) -> float:
    """The interpreter's floor: the five method calls of a cycle, doing nothing."""
    empty = _Empty()
    start = time.perf_counter()
    for _ in range(n):
        empty.mark()
        empty.mark()
        empty.mark()
        empty.mark()
        empty.mark()
    return time.perf_counter() - start


def state_dict_calls(n: int) -> float:
    progress = _progress_in_epoch()
    start = time.perf_counter()
    for _ in range(n):
        progress.state_dict()
    return time.perf_counter() - start


def _instructions(mode: str, n: int) -> int:
    return instructions(__file__, mode, str(n))


def _per_call_instructions(mode: str) -> float:
    small, large = 1_000, 21_000
    return (_instructions(mode, large) - _instructions(mode, small)) / (large - small)


def main() -> None:
    n, rounds = 200_000, 7
    tracked, bare, empty, dumps = [], [], [], []
    for _ in range(rounds):  # interleaved so machine noise hits all alike
        tracked.append(tracked_cycles(n) / n * 1e6)
        bare.append(bare_increments(n) / n * 1e6)
        empty.append(empty_calls(n) / n * 1e6)
        dumps.append(state_dict_calls(n // 100) / (n // 100) * 1e6)
    t, b, e, s = (statistics.median(x) for x in (tracked, bare, empty, dumps))
    print(f"train-batch cycle (ready..completed + optimizer step): {t:.3f} us   target <= 1 us")
    print(f"bare loop, {INCREMENTS_PER_CYCLE} int increments:                        {b:.3f} us   cycle/bare {t / b:.1f}x")
    print(f"floor, 5 empty method calls:                           {e:.3f} us   cycle/floor {t / e:.1f}x")
    print(f"state_dict():                                           {s:.2f} us   target <= 20 us")
    if shutil.which("valgrind"):
        print(f"callgrind, train-batch cycle: {_per_call_instructions('cycle'):.0f} instructions   target <= ~3000")
        print(f"callgrind, bare increments:   {_per_call_instructions('bare'):.0f} instructions")
        print(f"callgrind, 5 empty calls:     {_per_call_instructions('empty'):.0f} instructions")
        print(f"callgrind, state_dict():      {_per_call_instructions('state_dict'):.0f} instructions")
    else:
        print("callgrind: valgrind not installed, instruction counts skipped")


if __name__ == "__main__":
    if len(sys.argv) == 3:
        {"cycle": tracked_cycles, "bare": bare_increments, "empty": empty_calls, "state_dict": state_dict_calls}[sys.argv[1]](int(sys.argv[2]))
    else:
        main()
