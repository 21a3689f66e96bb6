"""Per-batch cost of AcceleratorProgress beside the same bare Accelerate loop.

Tiny model (Linear(32, 2)), batches of 4, gradient accumulation 2, one thread. Rounds of
the loop with and without the tracker are interleaved and the median per-batch times
compared (target, issue 26: at most 1 % extra). Then, if valgrind is installed, callgrind counts
the instructions of the same loops, interleaved in one process, at two batch counts; the
difference over the extra batches is the per-batch cost, each mode's least figure over the
repeats, the garbage collector run between loops (see _callgrind.py). Prints figures;
asserts nothing.

The training step's allocations move that difference by several hundred instructions a batch from
one run to the next, so ``--exact`` also counts the tracker's own instructions without training:
``fit.train()`` inside ``fit.epochs()`` over a list of ready batches against the bare loop over it,
and the torch optimizer inside a prepared one, whose ``step`` does nothing, with and without the
tracker's step hook (one step per ``ACCUMULATION`` batches); those counts repeat to a few instructions.

    python benchmarks/accelerate_overhead.py               # timing, then callgrind
    python benchmarks/accelerate_overhead.py --callgrind   # counts only
    python benchmarks/accelerate_overhead.py --exact       # the tracker's own instructions only
"""

from __future__ import annotations

import gc
import os
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from _callgrind import counts_per_batch, main, run_segments, segment, segment_instructions
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tracker_core.integrations.accelerate import AcceleratorProgress

ROUNDS = 15
BATCHES = 200  # per round
# shorter loops, more of them: the noise is per batch (the allocators' state), so more repeats steady the least
CALLGRIND_SMALL, CALLGRIND_LARGE, CALLGRIND_REPEATS = 20, 120, 9
EXACT_SMALL, EXACT_LARGE, ACCUMULATION = 100, 1_100, 2


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
    with progress.fit(1) as fit:
        for _epoch in fit.epochs():
            for batch in fit.train(loader):
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
        f"(median of per-round ratios {100 * (statistics.median(ratios) - 1):+.2f} %; target <= 1 %)"
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
        "(target <= 1 %)"
    )


class _Nop(torch.optim.Optimizer):
    """An optimizer whose step does nothing: torch still runs its step hooks around it."""

    def __init__(self, params: object) -> None:
        super().__init__(params, {})  # type: ignore[arg-type]

    def step(self, closure: object = None) -> None:  # type: ignore[override]
        return None


def exact_segments() -> None:
    """What ``--exact`` counts: ``EXACT_SMALL`` and ``EXACT_LARGE`` batches (or steps) of each mode, 3 times."""
    torch.set_num_threads(1)
    batch = (torch.zeros(4, 32), torch.zeros(4, 2))
    batches = [batch] * EXACT_LARGE
    accelerators = [Accelerator(cpu=True, gradient_accumulation_steps=ACCUMULATION) for _ in range(2)]
    steppers = [a.prepare(_Nop(torch.nn.Linear(32, 2).parameters())) for a in accelerators]
    progress = AcceleratorProgress(accelerators[0])  # hooks steppers[0]

    def tracked(n: int) -> None:
        data = batches[:n]
        with progress.fit(1) as fit:
            for _epoch in fit.epochs():
                for _batch in fit.train(data):
                    pass

    def bare(n: int) -> None:
        data = batches[:n]
        for _epoch in range(1):
            for _batch in data:
                pass

    def steps(stepper: Any) -> Callable[[int], None]:
        step = stepper.optimizer.step  # torch's, with its hooks (AcceleratedOptimizer.step adds ~700k of its own)

        def run(n: int) -> None:
            for _ in range(n):
                step()

        return run

    modes = {"bare loop": bare, "train()": tracked, "step": steps(steppers[1]), "hooked step": steps(steppers[0])}
    for run in modes.values():
        run(EXACT_SMALL)  # warm-up (Python specializes the code on its first runs)
    for _ in range(3):
        for name, run in modes.items():
            for n in (EXACT_SMALL, EXACT_LARGE):
                gc.collect()
                segment(f"{name} {n}", run, n)


def exact() -> None:
    if shutil.which("valgrind") is None:
        print("callgrind: valgrind not installed, instruction counts skipped")
        return
    counts = segment_instructions(__file__, "--exact-segments")
    per: dict[str, list[float]] = {}
    for (label, small), (_, large) in zip(counts[::2], counts[1::2]):
        per.setdefault(label.rsplit(" ", 1)[0], []).append((large - small) / (EXACT_LARGE - EXACT_SMALL))
    least = {mode: min(values) for mode, values in per.items()}
    loop, hook = least["train()"] - least["bare loop"], least["hooked step"] - least["step"]
    print("callgrind, instructions per batch (or step) of each repeat:")
    for mode, values in per.items():
        print(f"  {mode + ':':13} {', '.join(f'{value:,.1f}' for value in values)}")
    print("the tracker's own instructions (least of the repeats):")
    print(f"  fit.train() in fit.epochs(), per batch:{loop:8.0f}")
    print(f"  the optimizer step hook, per step:        {hook:8.0f}")
    print(f"  per batch, one step per {ACCUMULATION} batches:       {loop + hook / ACCUMULATION:8.0f}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    if sys.argv[1:] == ["--exact"]:
        exact()
    elif sys.argv[1:] == ["--exact-segments"]:
        exact_segments()
    else:
        main(timing, callgrind_segments, callgrind)
