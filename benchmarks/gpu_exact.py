"""Exact on a GPU: a run killed mid-epoch and mid-accumulation resumes as if never interrupted.

    python benchmarks/gpu_exact.py [--device cuda|cpu] [--framework lightning|ignite|accelerate ...] [--amp off|on|both]

Without CUDA (and ``--device cuda``, the default) it prints why it skips and exits 0. Otherwise,
for each framework, three fresh processes train an MLP with dropout on one device (the dropout
draws from the device's generator): ``full`` trains uninterrupted; ``kill`` saves the framework's
checkpoint after train batch 5 (epoch 1, batch 1 of 4: mid-epoch, inside an accumulation window
of 2) and then SIGKILLs itself; ``resume`` (global RNGs seeded differently) loads that checkpoint
and trains to the end. Each program runs in fp32 and with AMP (fp16 autocast and a
``GradScaler`` whose scale grows every 2 steps, saved in the framework's own checkpoint; the
partial gradients of the window are scaled by it). It prints whether the resumed run's weights
(``torch.equal``), the sample ids of every step, and the full progress state (all but its
wall-clock times, which differ between any two runs) equal the uninterrupted run's; the exit status is 1 if any does not. ``--device cpu`` runs the same
programs on the CPU (a check of the script; Accelerate has no CPU fp16 scaler, so its AMP run is
skipped there).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import comparable_state

FRAMEWORKS = ("lightning", "ignite", "accelerate")
SAMPLES, BATCH_SIZE, EPOCHS, ACCUMULATION = 10, 3, 3, 2
BATCHES_PER_EPOCH = -(-SAMPLES // BATCH_SIZE)  # 4, the last of 1 sample
KILL_AFTER = 5  # train batches: epoch 1, batch 1 of 4, the first half of an accumulation window
CHILD_TIMEOUT_S = 300
Record = Callable[[list[int]], None]


class Indexed(Dataset[tuple[torch.Tensor, torch.Tensor, int]]):
    """Sample ``i`` is ``(x_i, y_i, i)``, the same values in every process."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(1)
        self.x = torch.randn(SAMPLES, 4, generator=generator)
        self.y = torch.randn(SAMPLES, 1, generator=generator)

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        return self.x[index], self.y[index], index


def _model(device: str) -> torch.nn.Module:
    torch.manual_seed(0)  # the same initial weights in every process
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(16, 1))
    return model.to(device)


def _optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def _loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(model(x), y)


def _loader() -> StatefulDataLoader[Any]:
    """A shuffled loader with a position of its own: the mid-epoch checkpoint resumes at its batch."""
    return StatefulDataLoader(Indexed(), batch_size=BATCH_SIZE, shuffle=True)


def _seed(value: int) -> None:
    """The global RNGs (CPU, Python, NumPy and every CUDA device); a resume must not depend on them."""
    torch.manual_seed(value)
    random.seed(value)
    np.random.seed(value)


def _kill() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _scaler(device: str) -> torch.amp.GradScaler:
    return torch.amp.GradScaler(device, init_scale=2.0**8, growth_interval=2)


# the three programs: train, and at KILL_AFTER save the framework's checkpoint and die ----------
def train_lightning(device: str, folder: Path, phase: str, amp: bool, record: Record) -> tuple[torch.nn.Module, Any]:
    import pytorch_lightning as pl
    from pytorch_lightning.plugins import MixedPrecision

    from tracker_core.integrations.lightning import ProgressTracker

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = _model(device)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y, ids = batch
            record(ids.tolist())
            return _loss(self.net, x, y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return _optimizer(self.net)

    class SaveAndDie(pl.Callback):
        def __init__(self) -> None:
            self.batches = 0

        def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
            self.batches += 1
            if self.batches == KILL_AFTER:
                trainer.save_checkpoint(folder / "kill.ckpt")
                _kill()

    module = Module()
    _seed(1234 if phase == "resume" else 0)
    trainer = pl.Trainer(
        accelerator="gpu" if device == "cuda" else "cpu",
        devices=1,
        max_epochs=EPOCHS,
        accumulate_grad_batches=ACCUMULATION,
        limit_val_batches=0,
        enable_progress_bar=False,
        enable_checkpointing=False,
        logger=False,
        enable_model_summary=False,
        callbacks=[ProgressTracker(), *([SaveAndDie()] if phase == "kill" else [])],
        plugins=[MixedPrecision("16-mixed", device, _scaler(device))] if amp else None,
    )
    ckpt_path = str(folder / "kill.ckpt") if phase == "resume" else None
    trainer.fit(module, _loader(), ckpt_path=ckpt_path, weights_only=True)
    return module.net, trainer


def train_ignite(device: str, folder: Path, phase: str, amp: bool, record: Record) -> tuple[torch.nn.Module, Any]:
    from ignite.engine import Engine, Events
    from ignite.handlers import Checkpoint, DiskSaver

    from tracker_core.integrations.ignite import ProgressHandler

    model = _model(device)
    optimizer = _optimizer(model)
    scaler = _scaler(device) if amp else None
    _seed(1234 if phase == "resume" else 0)

    def step(engine: Engine, batch: Any) -> None:
        x, y, ids = batch
        record(ids.tolist())
        with torch.autocast(device, dtype=torch.float16, enabled=amp):
            loss = _loss(model, x.to(device), y.to(device)) / ACCUMULATION
        torch.autograd.backward(loss if scaler is None else scaler.scale(loss))
        in_epoch = (engine.state.iteration - 1) % BATCHES_PER_EPOCH + 1
        if in_epoch % ACCUMULATION == 0 or in_epoch == BATCHES_PER_EPOCH:  # Lightning's and Accelerate's rule
            if scaler is None:
                optimizer.step()
            else:
                scaler.step(optimizer)
                scaler.update()
            optimizer.zero_grad()

    trainer = Engine(step)
    progress = ProgressHandler()
    progress.attach(trainer, optimizers=[optimizer], scaler=scaler)
    to_save: dict[str, Any] = {"trainer": trainer, "model": model, "optimizer": optimizer, "progress": progress}
    if scaler is not None:
        to_save["scaler"] = scaler
    if phase == "kill":
        saver = Checkpoint(to_save, DiskSaver(str(folder), require_empty=False), filename_prefix="kill")
        trainer.add_event_handler(Events.ITERATION_COMPLETED(once=KILL_AFTER), saver)
        trainer.add_event_handler(Events.ITERATION_COMPLETED(once=KILL_AFTER), _kill)
    loader = _loader()  # before the load: building a shuffled loader draws the global RNG
    if phase == "resume":
        (saved,) = folder.glob("kill_*.pt")
        Checkpoint.load_objects(to_save, str(saved))
    trainer.run(loader, max_epochs=EPOCHS)
    return model, trainer


def train_accelerate(device: str, folder: Path, phase: str, amp: bool, record: Record) -> tuple[torch.nn.Module, Any]:
    from accelerate.accelerator import Accelerator
    from accelerate.utils import DataLoaderConfiguration, GradScalerKwargs

    from tracker_core.integrations.accelerate import AcceleratorProgress

    accelerator = Accelerator(
        cpu=device == "cpu",
        gradient_accumulation_steps=ACCUMULATION,
        mixed_precision="fp16" if amp else "no",
        kwargs_handlers=[GradScalerKwargs(init_scale=2.0**8, growth_interval=2)],
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True),  # save_state keeps its position
    )
    model = _model(device)
    optimizer = _optimizer(model)
    _seed(1234 if phase == "resume" else 0)
    model, optimizer, train = accelerator.prepare(model, optimizer, _loader())  # type: ignore[no-untyped-call]
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    progress.track_train_loader(train)
    if phase == "resume":
        accelerator.load_state(str(folder / "kill"))
    batches = 0
    with progress.fit(EPOCHS) as fit:
        for _ in fit.epochs():
            for x, y, ids in fit.train(train):
                record(ids.tolist())
                with accelerator.accumulate(model):
                    accelerator.backward(_loss(model, x, y))  # type: ignore[no-untyped-call]
                    optimizer.step()
                    optimizer.zero_grad()
                batches += 1
                if phase == "kill" and batches == KILL_AFTER:
                    accelerator.save_state(str(folder / "kill"))
                    _kill()
    return model, accelerator


TRAIN = {"lightning": train_lightning, "ignite": train_ignite, "accelerate": train_accelerate}


def child(program: str, phase: str, device: str, folder: Path) -> None:
    """One process: train (``phase`` full, kill or resume); write the ids of every step, and at the end the result."""
    import tracker_core

    torch.use_deterministic_algorithms(True, warn_only=True)
    framework, _, amp = program.partition("+")
    ids_file = folder / f"{program}-{phase}-ids.jsonl"

    def record(ids: list[int]) -> None:
        with ids_file.open("a") as stream:  # closed before a kill: no id is lost
            stream.write(json.dumps(ids) + "\n")

    model, owner = TRAIN[framework](device, folder / program, phase, amp == "amp", record)
    torch.save(
        {
            "weights": [p.detach().cpu().clone() for p in model.parameters()],
            "progress": tracker_core.get_progress(owner).state_dict(),
        },
        folder / f"{program}-{phase}.pt",
    )


# the parent: run the three processes per program and compare ---------------------------------
def _run_child(program: str, phase: str, device: str, folder: Path) -> str:
    """Run one child; '' if it ended as it should (killed by SIGKILL for ``kill``), else what went wrong."""
    env = dict(os.environ, CUBLAS_WORKSPACE_CONFIG=":4096:8", PYTHONWARNINGS="ignore")
    command = [sys.executable, __file__, "--child", program, phase, "--device", device, "--folder", str(folder)]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"{phase} process ran over {CHILD_TIMEOUT_S} s"
    expected = -signal.SIGKILL if phase == "kill" else 0
    if done.returncode != expected:
        return f"{phase} process ended with {done.returncode} (expected {expected}):\n{done.stderr[-3000:]}"
    return ""


def _ids(folder: Path, program: str, phase: str) -> list[list[int]]:
    path = folder / f"{program}-{phase}-ids.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def compare(program: str, device: str, root: Path) -> bool:
    """Run full, kill and resume of ``program``; print one line of findings; whether all were equal."""
    label = f"{program.replace('+', ' with ')} on {device}"
    if program == "accelerate+amp" and device == "cpu":
        print(f"{label}: skipped (Accelerate's fp16 needs a GPU; on the CPU it is bf16, without a scaler)")
        return True
    (root / program).mkdir()
    for phase in ("full", "kill", "resume"):
        failure = _run_child(program, phase, device, root)
        if failure:
            print(f"{label}: FAILED: {failure}", flush=True)
            return False
    full = torch.load(root / f"{program}-full.pt", weights_only=True)
    resumed = torch.load(root / f"{program}-resume.pt", weights_only=True)
    weights = len(full["weights"]) == len(resumed["weights"]) and all(
        torch.equal(a, b) for a, b in zip(full["weights"], resumed["weights"])
    )
    killed = _ids(root, program, "kill")
    ids = len(killed) == KILL_AFTER and killed + _ids(root, program, "resume") == _ids(root, program, "full")
    full_counts, resumed_counts = (comparable_state(state["progress"]) for state in (full, resumed))
    progress = full_counts == resumed_counts
    differing = sorted(k for k in full_counts if full_counts[k] != resumed_counts.get(k))
    print(
        f"{label}: weights equal: {weights}; sample ids equal: {ids}; progress equal: {progress}"
        + (f" (differs in {', '.join(differing)})" if differing else ""),
        flush=True,
    )
    return weights and ids and progress


def main() -> int:
    parser = argparse.ArgumentParser(description="Exact on a GPU: a killed run resumes as if never interrupted.")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--framework", choices=FRAMEWORKS, action="append")
    parser.add_argument("--amp", choices=("off", "on", "both"), default="both")
    parser.add_argument("--child", nargs=2, metavar=("PROGRAM", "PHASE"))
    parser.add_argument("--folder", type=Path)
    args = parser.parse_args()
    if args.child:
        warnings.filterwarnings("ignore")
        child(args.child[0], args.child[1], args.device, args.folder)
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_exact: skipped: no CUDA device here (torch.cuda.is_available() is False)")
        return 0
    if args.device == "cuda":
        print(f"gpu_exact: {torch.cuda.get_device_name(0)}, torch {torch.__version__}", flush=True)
    suffixes = {"off": [""], "on": ["+amp"], "both": ["", "+amp"]}[args.amp]
    programs = [framework + suffix for suffix in suffixes for framework in args.framework or FRAMEWORKS]
    with tempfile.TemporaryDirectory() as folder:
        results = [compare(program, args.device, Path(folder)) for program in programs]
    print(f"gpu_exact: all exact: {all(results)}")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
