"""Kills processes in the middle of ``accelerator.save_state`` into one fixed folder, many times, fast.

Run as a script: it imports torch and Accelerate once, then for each line ``<folder> <delay>`` read
from stdin forks a child that trains Linear(4, 1) (SGD with momentum, a StepLR, a random draw per
batch) with an AcceleratorProgress and calls ``save_state(<folder>)`` after every batch, appending
``<save index> <global step> <weights CRC-32s> <optimizer CRC-32> <scheduler CRC-32> <RNG CRC-32>`` to
``<folder>.log`` before each save and ``done <save index>`` after it; the
zygote sends the child SIGKILL ``delay`` seconds after the child's first save ended, reaps it and
prints ``killed`` (or ``finished`` if the child ended first). A real SIGKILL from another process at
an arbitrary point of a real save.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from torch.utils.data import DataLoader, TensorDataset

from tracker_core.integrations.accelerate import AcceleratorProgress

from helpers.save_crc import save_rng_crc32, state_crc32, weights_crc32

SAVES = 400  # more than any delay lets a child reach


def _train_and_save(folder: Path, ready: int, saves: int = SAVES) -> None:
    """The child: a save after every batch into ``folder``; writes one byte to ``ready`` after its first."""
    warnings.simplefilter("ignore")
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.linspace(-1, 1, 40).reshape(10, 4)
    loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=2, shuffle=True)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.99)
    model, optimizer, scheduler, loader = accelerator.prepare(model, optimizer, scheduler, loader)
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    log = open(f"{folder}.log", "a", buffering=1)  # noqa: SIM115 - the child is killed, never closes it
    done = 0
    with progress.fit(saves) as fit:
        for _ in fit.epochs():
            for inputs, targets in progress.train(loader):
                with accelerator.accumulate(model):
                    noise = 0.01 * torch.rand(1)  # the global RNG moves every batch
                    accelerator.backward(torch.nn.functional.mse_loss(model(inputs), targets + noise))
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad()
                weights = weights_crc32(accelerator.get_state_dict(model, unwrap=False))
                crcs = " ".join(f"{name}={crc}" for name, crc in sorted(weights.items()))
                states = f"{state_crc32(optimizer.state_dict())} {state_crc32(scheduler.state_dict())}"
                rng = save_rng_crc32(accelerator.step)
                log.write(f"{done} {progress.view.train.batches.lifetime.started} {crcs} {states} {rng}\n")
                accelerator.save_state(str(folder))
                log.write(f"done {done}\n")
                if done == 0:
                    os.write(ready, b"x")
                done += 1
                if done == saves:
                    return


def _warm_up() -> None:
    """One short run in the zygote itself: the lazy imports of a first Accelerator and save happen once here."""
    with tempfile.TemporaryDirectory() as scratch:
        _train_and_save(Path(scratch) / "checkpoint", os.open(os.devnull, os.O_WRONLY), saves=2)


def main() -> None:
    torch.set_num_threads(1)
    _warm_up()
    for line in sys.stdin:
        folder, delay = line.split()
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:
            os.close(read_end)
            try:
                _train_and_save(Path(folder), write_end)
            finally:
                os._exit(0)
        os.close(write_end)
        started = os.read(read_end, 1)
        os.close(read_end)
        if started:
            time.sleep(float(delay))
        try:
            os.kill(child, signal.SIGKILL)
            outcome = "killed"
        except ProcessLookupError:
            outcome = "finished"
        os.waitpid(child, 0)
        print(outcome, flush=True)


if __name__ == "__main__":
    main()
