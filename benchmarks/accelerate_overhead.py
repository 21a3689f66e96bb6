"""Per-batch cost of AcceleratorProgress beside the same bare Accelerate loop.

Tiny model (Linear(32, 2)), batches of 4, gradient accumulation 2, one thread. Rounds of
the loop with and without the tracker are interleaved and the median per-batch times
compared (target: at most 0.5 % extra). Then, if valgrind is installed, callgrind counts
the instructions of whole runs at two batch counts; their difference per batch is the
deterministic per-batch cost. Prints figures; asserts nothing.

    python benchmarks/accelerate_overhead.py            # timing, then callgrind
    python benchmarks/accelerate_overhead.py --once with 400   # one run (what callgrind measures)
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import time

import torch
from _callgrind import instructions
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from integrations.accelerate import AcceleratorProgress  # noqa: E402

ROUNDS = 15
BATCHES = 200  # per round


def _setup(batches: int) -> tuple[Accelerator, torch.nn.Module, torch.optim.Optimizer, DataLoader]:
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = torch.nn.Linear(32, 2)
    data = TensorDataset(torch.randn(batches * 4, 32), torch.randn(batches * 4, 2))
    model, optimizer, loader = accelerator.prepare(
        model, torch.optim.SGD(model.parameters(), lr=0.01), DataLoader(data, batch_size=4)
    )
    return accelerator, model, optimizer, loader


def _step(accelerator: Accelerator, model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: list) -> None:
    x, y = batch
    with accelerator.accumulate(model):
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()


def bare(accelerator: Accelerator, model: torch.nn.Module, optimizer: torch.optim.Optimizer, loader: DataLoader) -> None:
    for batch in loader:
        _step(accelerator, model, optimizer, batch)


def tracked(progress: AcceleratorProgress, accelerator: Accelerator, model: torch.nn.Module,
            optimizer: torch.optim.Optimizer, loader: DataLoader) -> None:
    for _epoch in progress.epochs(1):
        for batch in progress.train(loader):
            _step(accelerator, model, optimizer, batch)


def timing() -> None:
    accelerator, model, optimizer, loader = _setup(BATCHES)
    progress = AcceleratorProgress(accelerator)
    per_batch: dict[str, list[float]] = {"without": [], "with": []}
    for round_index in range(ROUNDS + 1):
        for name in ("without", "with") if round_index % 2 else ("with", "without"):
            start = time.perf_counter()
            if name == "with":
                tracked(progress, accelerator, model, optimizer, loader)
            else:
                bare(accelerator, model, optimizer, loader)
            if round_index:  # the first round warms up
                per_batch[name].append((time.perf_counter() - start) / BATCHES)
    without, with_ = statistics.median(per_batch["without"]), statistics.median(per_batch["with"])
    ratios = [w / b for w, b in zip(per_batch["with"], per_batch["without"])]
    print(f"per batch without tracker: {without * 1e6:8.1f} us (median of {ROUNDS} rounds of {BATCHES})")
    print(f"per batch with tracker:    {with_ * 1e6:8.1f} us")
    print(f"overhead: {(with_ - without) * 1e6:+.2f} us/batch = {100 * (with_ / without - 1):+.2f} % "
          f"(median of per-round ratios {100 * (statistics.median(ratios) - 1):+.2f} %; target <= 0.5 %)")


def once(mode: str, batches: int) -> None:
    accelerator, model, optimizer, loader = _setup(batches)
    if mode == "with":
        tracked(AcceleratorProgress(accelerator), accelerator, model, optimizer, loader)
    else:
        bare(accelerator, model, optimizer, loader)


def _instructions(mode: str, batches: int) -> int:
    return instructions(__file__, "--once", mode, str(batches))


def callgrind(low: int = 50, high: int = 250) -> None:
    if shutil.which("valgrind") is None:
        print("callgrind: valgrind is not installed (apt-get install valgrind); skipped")
        return
    per_batch = {}
    for mode in ("without", "with"):
        per_batch[mode] = (_instructions(mode, high) - _instructions(mode, low)) / (high - low)
    extra = per_batch["with"] - per_batch["without"]
    print(f"callgrind instructions per batch without tracker: {per_batch['without']:,.0f}")
    print(f"callgrind instructions per batch with tracker:    {per_batch['with']:,.0f}")
    print(f"callgrind overhead: {extra:+,.0f} instructions/batch = {100 * extra / per_batch['without']:+.2f} %")


if __name__ == "__main__":
    torch.set_num_threads(1)
    if len(sys.argv) == 4 and sys.argv[1] == "--once":
        once(sys.argv[2], int(sys.argv[3]))
    else:
        timing()
        callgrind()
