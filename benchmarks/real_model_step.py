"""The tracker's per-batch marks as a share of one optimizer step of a small real model.

The model: a 2-layer MLP (784-256-10, ReLU) on a batch of 256x784, CPU, one thread; one step is
forward, cross-entropy, backward and an SGD step. The tracker's work per batch: the four phase
marks of a train batch with its samples read from the batch (``batch_processed_of``) and one
optimizer step counted, the most calls an adapter makes for a batch. Both are measured side by side
in one run: timings interleaved (medians; they swing +-30% here), then callgrind instruction counts
of the same loops when valgrind is installed (only the measured loops are counted, see
_callgrind.py). Target (issue 26): the marks at most 0.1% of a step. Prints figures only.
Run: .venv/bin/python benchmarks/real_model_step.py [--callgrind]  (--callgrind: counts only)
"""

from __future__ import annotations

import gc
import shutil
import statistics
import time

import torch
from _callgrind import main, segment, segment_instructions

from tracker_core import Progress

TARGET = 0.1  # percent of one step
MARK_SMALL, MARK_LARGE = 1_000, 11_000  # marks are cheap: many, so the count per batch is steady
STEP_SMALL, STEP_LARGE = 2, 12
REPEATS = 3


def _model_and_batch() -> tuple[torch.nn.Module, torch.optim.Optimizer, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    return model, optimizer, (torch.randn(256, 784), torch.randint(0, 10, (256,)))


def model_steps(n: int) -> float:
    """Seconds for ``n`` optimizer steps of the model."""
    model, optimizer, (x, y) = _model_and_batch()
    start = time.perf_counter()
    for _ in range(n):
        optimizer.zero_grad()
        torch.autograd.backward(torch.nn.functional.cross_entropy(model(x), y))
        optimizer.step()
    return time.perf_counter() - start


def tracked_marks(n: int) -> float:
    """Seconds for the tracker's marks of ``n`` train batches of the model's batch, inside one epoch."""
    _, _, batch = _model_and_batch()
    progress = Progress()
    progress.run_ready("fit")
    progress.run_started()
    train = progress.train
    train.epoch_ready()
    train.epoch_started()
    start = time.perf_counter()
    for _ in range(n):
        train.batch_ready()
        train.batch_started()
        train.optimizer_step()
        train.batch_processed_of(batch)
        train.batch_completed()
    return time.perf_counter() - start


def callgrind_segments() -> None:
    """What callgrind counts: each loop at two lengths, interleaved, after a warm-up of each."""
    torch.set_num_threads(1)
    model_steps(STEP_SMALL)
    tracked_marks(MARK_SMALL)
    for _ in range(REPEATS):
        for name, run, lengths in (
            ("marks", tracked_marks, (MARK_SMALL, MARK_LARGE)),
            ("step", model_steps, (STEP_SMALL, STEP_LARGE)),
        ):
            for n in lengths:
                gc.collect()
                segment(f"{name} {n}", run, n)


def callgrind() -> None:
    if shutil.which("valgrind") is None:
        print("callgrind: valgrind not installed, instruction counts skipped")
        return
    counts = segment_instructions(__file__, "--callgrind-segments")
    per: dict[str, list[float]] = {}
    for (label, small), (_, large) in zip(counts[::2], counts[1::2]):
        name = label.rsplit(" ", 1)[0]
        extra = MARK_LARGE - MARK_SMALL if name == "marks" else STEP_LARGE - STEP_SMALL
        per.setdefault(name, []).append((large - small) / extra)
    marks, step = min(per["marks"]), min(per["step"])
    print(f"callgrind, one model step:          {step:14,.0f} instructions  (repeats: {_listed(per['step'])})")
    print(f"callgrind, one batch's marks:       {marks:14,.0f} instructions  (repeats: {_listed(per['marks'])})")
    print(f"callgrind, marks / step: {marks / step * 100:.4f}%  (target <= {TARGET}%)")


def _listed(values: list[float]) -> str:
    return ", ".join(f"{value:,.0f}" for value in values)


def timing() -> None:
    torch.set_num_threads(1)
    steps, marks, rounds = 50, 100_000, 7
    model_steps(5)  # warm up
    step_us, mark_us = [], []
    for _ in range(rounds):  # interleaved so machine noise hits both alike
        step_us.append(model_steps(steps) / steps * 1e6)
        mark_us.append(tracked_marks(marks) / marks * 1e6)
    step, mark = statistics.median(step_us), statistics.median(mark_us)
    print(f"one model step:     {step:10.1f} us  (median of {rounds} rounds of {steps})")
    print(f"one batch's marks:  {mark:10.3f} us  (median of {rounds} rounds of {marks})")
    print(f"marks / step: {mark / step * 100:.4f}%  (target <= {TARGET}%)")


if __name__ == "__main__":
    main(timing, callgrind_segments, callgrind)
