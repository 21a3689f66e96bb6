"""What committing an Accelerate checkpoint folder costs: ``save_state`` with and without a registered
AcceleratorProgress (whose ``state_dict()``, after Accelerate's files, reads back and CRC-32s every file of the
folder and writes its progress file, listing them, atomically), and what ``newest_intact_checkpoint`` spends
checking the folder (every listed file's size and CRC-32, the progress file's zip members).

A stack of Linear(1024, 1024) layers (``--megabytes`` of float32 weights, default 64) with an Adam
state (twice as much), on CPU, into a fresh folder each round; medians of ``--rounds`` rounds,
interleaved. Prints figures; asserts nothing.

    python benchmarks/save_state_integrity.py [--megabytes 64] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tracker_core.checkpoints import newest_intact_checkpoint
from tracker_core.integrations.accelerate import AcceleratorProgress


def _accelerator(megabytes: int, tracked: bool) -> Accelerator:
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    accelerator = Accelerator(cpu=True)
    layers = max(1, megabytes * 2**20 // (4 * 1024 * 1025))
    model = torch.nn.Sequential(*(torch.nn.Linear(1024, 1024) for _ in range(layers)))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.randn(2, 1024)).sum().backward()
    optimizer.step()  # an Adam state as large as the weights, twice
    optimizer.zero_grad(set_to_none=True)  # saved after the step, as usual: no partial gradients to save
    accelerator.prepare(model, optimizer)
    if tracked:
        accelerator.register_for_checkpointing(AcceleratorProgress(accelerator))
    return accelerator


def _seconds(action: object) -> float:
    started = time.perf_counter()
    action()  # type: ignore[operator]
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    times: dict[str, list[float]] = {"plain save_state": [], "tracked save_state": [], "newest_intact_checkpoint": []}
    with tempfile.TemporaryDirectory() as scratch:
        for round_index in range(args.rounds):
            for tracked in (False, True):
                accelerator = _accelerator(args.megabytes, tracked)
                folder = os.path.join(scratch, f"{round_index}-{tracked}")
                name = "tracked save_state" if tracked else "plain save_state"
                times[name].append(_seconds(lambda: accelerator.save_state(folder)))  # noqa: B023
                if tracked:
                    times["newest_intact_checkpoint"].append(_seconds(lambda: newest_intact_checkpoint([folder])))  # noqa: B023
    plain = statistics.median(times["plain save_state"])
    print(f"{args.megabytes} MB of weights, Adam, median of {args.rounds} rounds")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"  {name:26s} {median * 1000:8.1f} ms   {median / plain:5.2f}x plain save_state")


if __name__ == "__main__":
    main()
