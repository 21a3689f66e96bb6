"""Cost of one full train-batch event cycle and of state_dict(), against a bare int-increment loop.

Prints figures side by side from one run (timings here swing +-30%), plus callgrind
instruction counts per cycle when valgrind is installed (only the measured loops are
counted, see _callgrind.py). The fused cycle (``batch_begin``/``batch_end``) is what the
Ignite and Accelerate adapters use.
Targets (issue 2): cycle <= 1 us (~3,000 instructions), state_dict() <= 20 us.
Run: .venv/bin/python benchmarks/core_events.py [--callgrind]  (--callgrind: counts only)
"""

from __future__ import annotations

import functools
import statistics
import time

from _callgrind import counts_per_batch, main, run_segments

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


def fused_cycles(n: int) -> float:
    train = _progress_in_epoch().train
    start = time.perf_counter()
    for _ in range(n):
        train.batch_begin()
        train.optimizer_step()
        train.batch_end(4)
    return time.perf_counter() - start


def bare_increments(n: int) -> float:
    a = b = c = d = e = f = g = h = i = 0
    start = time.perf_counter()
    for _ in range(n):
        a += 1
        b += 1
        c += 1  # noqa: SIM113 - the increments are what is measured
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


MODES = {
    "cycle": tracked_cycles,
    "fused": fused_cycles,
    "bare": bare_increments,
    "empty": empty_calls,
    "state_dict": state_dict_calls,
}
CALLGRIND_SMALL, CALLGRIND_LARGE = 1_000, 11_000


def callgrind_segments() -> None:
    """What callgrind counts (see _callgrind.run_segments): each mode's loop of n calls."""
    run_segments(MODES, lambda mode, n: functools.partial(MODES[mode], n), CALLGRIND_SMALL, CALLGRIND_LARGE, 1)


def callgrind() -> None:
    measured = counts_per_batch(__file__, CALLGRIND_SMALL, CALLGRIND_LARGE)
    if measured is None:
        return
    count, _ = measured
    print(f"callgrind, train-batch cycle: {count['cycle']:.0f} instructions   target <= ~3000")
    print(f"callgrind, fused cycle:       {count['fused']:.0f} instructions")
    print(f"callgrind, bare increments:   {count['bare']:.0f} instructions")
    print(f"callgrind, 5 empty calls:     {count['empty']:.0f} instructions")
    print(f"callgrind, state_dict():      {count['state_dict']:.0f} instructions")


def timing() -> None:
    n, rounds = 200_000, 7
    tracked, fused, bare, empty, dumps = [], [], [], [], []
    for _ in range(rounds):  # interleaved so machine noise hits all alike
        tracked.append(tracked_cycles(n) / n * 1e6)
        fused.append(fused_cycles(n) / n * 1e6)
        bare.append(bare_increments(n) / n * 1e6)
        empty.append(empty_calls(n) / n * 1e6)
        dumps.append(state_dict_calls(n // 100) / (n // 100) * 1e6)
    t, f, b, e, s = (statistics.median(x) for x in (tracked, fused, bare, empty, dumps))
    print(f"train-batch cycle (ready..completed + optimizer step): {t:.3f} us   target <= 1 us")
    print(f"fused cycle (batch_begin, step, batch_end):            {f:.3f} us")
    print(
        f"bare loop, {INCREMENTS_PER_CYCLE} int increments:                        {b:.3f} us   cycle/bare {t / b:.1f}x"
    )
    print(f"floor, 5 empty method calls:                           {e:.3f} us   cycle/floor {t / e:.1f}x")
    print(f"state_dict():                                           {s:.2f} us   target <= 20 us")


if __name__ == "__main__":
    main(timing, callgrind_segments, callgrind)
