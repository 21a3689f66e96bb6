"""Per-batch cost of the Ignite ProgressHandler on a tiny model, against the same trainer without it.

Linear(32, 2), batch 4, SGD, one thread, a plain DataLoader. Timings are interleaved
(with, without, two do-nothing handlers) and the median per-batch ratio printed; they
swing +-30% here. Callgrind then counts the instructions of the same runs, interleaved
in one process, at two batch counts: the difference over the extra batches is the
per-batch cost (see _callgrind.py). Target (issue 26): overhead <= 2%. Prints figures only.
Run: .venv/bin/python benchmarks/ignite_overhead.py [--callgrind]  (--callgrind: counts only)
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from _callgrind import counts_per_batch, main, run_segments
from ignite.engine import Engine, Events, create_supervised_trainer
from torch.utils.data import DataLoader, TensorDataset

from tracker_core.integrations.ignite import ProgressHandler

MODES = ("without", "with", "two_empty")


def _trainer(mode: str, batches: int) -> tuple[Engine, DataLoader[tuple[torch.Tensor, ...]]]:
    torch.manual_seed(0)
    model = torch.nn.Linear(32, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    trainer = create_supervised_trainer(model, optimizer, torch.nn.CrossEntropyLoss())
    if mode == "with":
        ProgressHandler().attach(trainer, optimizers=[optimizer])
    elif mode == "two_empty":
        trainer.add_event_handler(Events.ITERATION_STARTED, lambda: None)
        trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda: None)
    data = TensorDataset(torch.randn(4 * batches, 32), torch.randint(0, 2, (4 * batches,)))
    return trainer, DataLoader(data, batch_size=4)


def seconds_per_batch(mode: str, batches: int) -> float:
    trainer, loader = _trainer(mode, batches)
    start = time.perf_counter()
    trainer.run(loader, max_epochs=1)
    return (time.perf_counter() - start) / batches


def dispatch_seconds(mode: str, batches: int) -> float:
    """Only the per-batch events and a do-nothing step on an engine inside an epoch: the handler's own
    cost, less noisy."""
    engine = Engine(lambda engine, batch: None)
    if mode == "with":
        ProgressHandler().attach(engine)
    batch = engine.state.batch = (torch.zeros(4, 32), torch.zeros(4))
    step = engine._process_function  # as the handler wrapped it: the batch ends when the step returns
    engine._fire_event(Events.STARTED)
    engine._fire_event(Events.EPOCH_STARTED)
    start = time.perf_counter()
    for _ in range(batches):
        engine._fire_event(Events.ITERATION_STARTED)
        step(engine, batch)
        engine._fire_event(Events.ITERATION_COMPLETED)
    return (time.perf_counter() - start) / batches


# as the Lightning and Accelerate benchmarks: the noise is per batch (the allocators' state), so more,
# shorter runs steady each mode's least figure
CALLGRIND_SMALL, CALLGRIND_LARGE, CALLGRIND_REPEATS = 20, 120, 9


def callgrind_segments() -> None:
    """What callgrind counts (see _callgrind.run_segments): one trainer.run per segment."""
    torch.set_num_threads(1)

    def prepare(mode: str, batches: int) -> Callable[[], object]:
        trainer, loader = _trainer(mode, batches)
        return lambda: trainer.run(loader, max_epochs=1)

    run_segments(MODES, prepare, CALLGRIND_SMALL, CALLGRIND_LARGE, CALLGRIND_REPEATS)


def timing() -> None:
    torch.set_num_threads(1)
    batches, rounds = 2_000, 9
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    ratios: dict[str, list[float]] = {"with": [], "two_empty": []}
    seconds_per_batch("without", 200)  # warm up
    for _ in range(rounds):
        for mode in MODES:
            times[mode].append(seconds_per_batch(mode, batches) * 1e6)
        for mode in ratios:
            ratios[mode].append(times[mode][-1] / times["without"][-1])
    without = statistics.median(times["without"])
    print(f"Ignite alone:                  {without:7.1f} us/batch")
    for mode, label in (("with", "with ProgressHandler"), ("two_empty", "with two do-nothing handlers")):
        overhead = (statistics.median(ratios[mode]) - 1) * 100
        print(
            f"{label + ':':30} {statistics.median(times[mode]):7.1f} us/batch  overhead {overhead:+.2f}%"
            + ("   target <= 2%" if mode == "with" else "")
        )
    dispatch = {
        mode: statistics.median(dispatch_seconds(mode, 100_000) * 1e6 for _ in range(5)) for mode in ("without", "with")
    }
    added = dispatch["with"] - dispatch["without"]
    print(
        f"per-batch events alone: {dispatch['without']:.2f} us without, {dispatch['with']:.2f} us with: "
        f"+{added:.2f} us = {added / without * 100:.2f}% of Ignite's batch above"
    )


def callgrind() -> None:
    measured = counts_per_batch(__file__, CALLGRIND_SMALL, CALLGRIND_LARGE)
    if measured is None:
        return
    counts, spread = measured
    base = counts["without"]
    print(
        f"callgrind, Ignite alone:       {base:9.0f} instructions/batch "
        f"(least of {CALLGRIND_REPEATS} repeats of {CALLGRIND_SMALL}/{CALLGRIND_LARGE}-batch runs; "
        f"largest spread between repeats of a mode: {spread:.0f})"
    )
    for mode in ("with", "two_empty"):
        print(
            f"callgrind, {mode:19} {counts[mode]:9.0f} instructions/batch  "
            f"+{counts[mode] - base:.0f} ({(counts[mode] / base - 1) * 100:+.2f}%)"
            + ("   target <= 2%" if mode == "with" else "")
        )


if __name__ == "__main__":
    main(timing, callgrind_segments, callgrind)
