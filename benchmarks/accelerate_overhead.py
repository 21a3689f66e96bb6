"""Per-batch cost of AcceleratorProgress beside the same bare Accelerate loop.

Tiny model (Linear(32, 2)), batches of 4, gradient accumulation 2, one thread. Rounds of
the loop with and without the tracker are interleaved and the median per-batch times
compared (target: at most 0.5 % extra). Then, if valgrind is installed, callgrind counts
the instructions of the same loops, interleaved in one process, at two batch counts; the
difference over the extra batches is the per-batch cost, each mode's least figure over the
repeats, the garbage collector run between loops (see _callgrind.py). Prints figures;
asserts nothing.

    python benchmarks/accelerate_overhead.py               # timing, then callgrind
    python benchmarks/accelerate_overhead.py --callgrind   # counts only
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable

import torch
from _callgrind import counts_per_batch, main, run_segments
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tracker_core.integrations.accelerate import AcceleratorProgress

ROUNDS = 15
BATCHES = 200  # per round
# shorter loops, more of them: the noise is per batch (the allocators' state), so more repeats steady the least
CALLGRIND_SMALL, CALLGRIND_LARGE, CALLGRIND_REPEATS = 20, 120, 9


def _setup(
    batches: int, accelerator: Accelerator | None = None
) -> tuple[Accelerator, torch.nn.Module, torch.optim.Optimizer, DataLoader]:
    torch.manual_seed(0)
    accelerator = accelerator or Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = torch.nn.Linear(32, 2)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.01))
    return accelerator, model, optimizer, _loader(accelerator, batches)


def _loader(accelerator: Accelerator, batches: int) -> DataLoader:
    data = TensorDataset(torch.randn(batches * 4, 32), torch.randn(batches * 4, 2))
    return accelerator.prepare(DataLoader(data, batch_size=4))


def _step(accelerator: Accelerator, model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: list) -> None:
    x, y = batch
    with accelerator.accumulate(model):
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()


def bare(
    accelerator: Accelerator, model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader: DataLoader
) -> None:
    for batch in loader:
        _step(accelerator, model, optimizer, batch)


def tracked(
    progress: AcceleratorProgress,
    accelerator: Accelerator,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    loader: DataLoader,
) -> None:
    for _epoch in progress.epochs(1):
        for batch in progress.train(loader):
            _step(accelerator, model, optimizer, batch)


def timing() -> None:
    with_tracker = _setup(BATCHES)
    progress = AcceleratorProgress(with_tracker[0])
    without_tracker = _setup(BATCHES, Accelerator(cpu=True, gradient_accumulation_steps=2))
    seconds: dict[str, list[float]] = {"without": [], "with": []}
    for round_index in range(ROUNDS + 1):
        for name in ("without", "with") if round_index % 2 else ("with", "without"):
            start = time.perf_counter()
            if name == "with":
                tracked(progress, *with_tracker)
            else:
                bare(*without_tracker)
            if round_index:  # the first round warms up
                seconds[name].append((time.perf_counter() - start) / BATCHES)
    without, with_ = statistics.median(seconds["without"]), statistics.median(seconds["with"])
    ratios = [w / b for w, b in zip(seconds["with"], seconds["without"])]
    print(f"per batch without tracker: {without * 1e6:8.1f} us (median of {ROUNDS} rounds of {BATCHES})")
    print(f"per batch with tracker:    {with_ * 1e6:8.1f} us")
    print(
        f"overhead: {(with_ - without) * 1e6:+.2f} us/batch = {100 * (with_ / without - 1):+.2f} % "
        f"(median of per-round ratios {100 * (statistics.median(ratios) - 1):+.2f} %; target <= 0.5 %)"
    )


def callgrind_segments() -> None:
    """What callgrind counts (see _callgrind.run_segments): one loop over a new loader per segment.

    Each mode has its own Accelerator (its own optimizer list), so the bare loop's optimizer
    is not hooked by the tracker.
    """
    torch.set_num_threads(1)
    with_tracker = _setup(1)
    progress = AcceleratorProgress(with_tracker[0])
    without_tracker = _setup(1, Accelerator(cpu=True, gradient_accumulation_steps=2))

    def prepare(mode: str, batches: int) -> Callable[[], object]:
        accelerator, model, optimizer, _ = with_tracker if mode == "with" else without_tracker
        loader = _loader(accelerator, batches)
        if mode == "with":
            return lambda: tracked(progress, accelerator, model, optimizer, loader)
        return lambda: bare(accelerator, model, optimizer, loader)

    run_segments(("without", "with"), prepare, CALLGRIND_SMALL, CALLGRIND_LARGE, CALLGRIND_REPEATS)


def callgrind() -> None:
    measured = counts_per_batch(__file__, CALLGRIND_SMALL, CALLGRIND_LARGE)
    if measured is None:
        return
    counts, spread = measured
    extra = counts["with"] - counts["without"]
    print(
        f"callgrind instructions per batch without tracker: {counts['without']:,.0f} "
        f"(least of {CALLGRIND_REPEATS} repeats of {CALLGRIND_SMALL}/{CALLGRIND_LARGE}-batch loops; "
        f"largest spread between repeats of a mode: {spread:,.0f})"
    )
    print(f"callgrind instructions per batch with tracker:    {counts['with']:,.0f}")
    print(
        f"callgrind overhead: {extra:+,.0f} instructions/batch = {100 * extra / counts['without']:+.2f} % "
        "(target <= 0.5 %)"
    )


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(timing, callgrind_segments, callgrind)
