"""Kills processes in the middle of Lightning's, Ignite's and Accelerate's (automatic naming) saves, many times.

Run as a script: it imports the frameworks once, then for each line ``<framework> <folder> <delay>`` read
from stdin forks a child that trains Linear(4, 1) (shuffled batches of 2 of 10 samples, SGD with momentum)
beside 4 MB of frozen weights (so that a write takes long enough to be cut), and saves after every batch
into ``<folder>``:

- ``lightning``: ``trainer.save_checkpoint(<folder>/last.ckpt)`` (one fixed file, rewritten in place) from
  ``on_train_batch_end`` of a callback after the ``ProgressTracker``;
- ``ignite``: a ``Checkpoint`` with a ``DiskSaver`` keeping the 2 newest files;
- ``accelerate``: ``save_state()`` with ``automatic_checkpoint_naming`` (``checkpoints/checkpoint_N``,
  at most 2 kept).

Before each save it appends ``<train batches processed> <tensor>=<CRC-32> ...`` (what that save will hold)
to ``<folder>.log``. The zygote sends SIGKILL ``delay`` seconds after the child's first save ended, reaps
it and prints ``killed`` (or ``finished``).
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

import pytorch_lightning as pl
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import ProjectConfiguration
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint, DiskSaver
from torch.utils.data import DataLoader, TensorDataset

from tracker_core import get_progress
from tracker_core.integrations.accelerate import AcceleratorProgress
from tracker_core.integrations.ignite import ProgressHandler
from tracker_core.integrations.lightning import ProgressTracker

from helpers.save_crc import tensor_crc32

EPOCHS = 200  # more than any delay lets a child reach
BALLAST = 1_000_000  # frozen float32 weights saved with the model


def _model() -> torch.nn.Module:
    model = torch.nn.Linear(4, 1)
    model.register_buffer("ballast", torch.arange(BALLAST, dtype=torch.float32))
    return model


def _loader() -> DataLoader[Any]:
    x = torch.linspace(-1, 1, 40).reshape(10, 4)
    return DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=2, shuffle=True)


def _log_line(log: TextIO, processed: int, weights: dict[str, torch.Tensor]) -> None:
    crcs = " ".join(f"{name}={tensor_crc32(tensor)}" for name, tensor in sorted(weights.items()))
    log.write(f"{processed} {crcs}\n")


class _Module(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = _model()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)


class _SaveEveryBatch(pl.Callback):
    def __init__(self, path: Path, log: TextIO, saved: Callable[[], None]) -> None:
        super().__init__()
        self._path, self._log, self._saved = path, log, saved

    def on_train_batch_end(self, trainer: pl.Trainer, module: pl.LightningModule, *args: Any) -> None:
        _log_line(self._log, get_progress(trainer).train.batches.lifetime.processed, module.state_dict())
        trainer.save_checkpoint(self._path)
        self._saved()


def _lightning(folder: Path, log: TextIO, saved: Callable[[], None], epochs: int) -> None:
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=epochs,
        callbacks=[ProgressTracker(), _SaveEveryBatch(folder / "last.ckpt", log, saved)],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(_Module(), _loader())


def _ignite(folder: Path, log: TextIO, saved: Callable[[], None], epochs: int) -> None:
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def update(engine: Engine, batch: Any) -> None:
        x, y = batch
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()

    trainer = Engine(update)
    progress = ProgressHandler()
    progress.attach(trainer, optimizers=[optimizer])
    trainer.add_event_handler(
        Events.ITERATION_COMPLETED,
        lambda _: _log_line(log, progress.view.train.batches.lifetime.processed, model.state_dict()),
    )
    to_save = {"trainer": trainer, "model": model, "optimizer": optimizer, "progress": progress}
    trainer.add_event_handler(
        Events.ITERATION_COMPLETED, Checkpoint(to_save, DiskSaver(str(folder), require_empty=False), n_saved=2)
    )
    trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda _: saved())
    trainer.run(_loader(), max_epochs=epochs)


def _accelerate(folder: Path, log: TextIO, saved: Callable[[], None], epochs: int) -> None:
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    project = ProjectConfiguration(project_dir=str(folder), automatic_checkpoint_naming=True, total_limit=2)
    accelerator = Accelerator(cpu=True, project_config=project)
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model, optimizer, loader = accelerator.prepare(model, optimizer, _loader())
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    with progress.fit(epochs) as fit:
        for _ in fit.epochs():
            for inputs, targets in progress.train(loader):
                accelerator.backward(torch.nn.functional.mse_loss(model(inputs), targets))
                optimizer.step()
                optimizer.zero_grad()
                # a save inside the loop body counts the batch as processed
                _log_line(log, progress.view.train.batches.lifetime.started, accelerator.get_state_dict(model))
                accelerator.save_state()
                saved()


RUNS = {"lightning": _lightning, "ignite": _ignite, "accelerate": _accelerate}


def _train_and_save(framework: str, folder: Path, ready: int, epochs: int = EPOCHS) -> None:
    """The child: a save after every batch into ``folder``; writes one byte to ``ready`` after its first."""
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    folder.mkdir(parents=True, exist_ok=True)
    first = [True]

    def saved() -> None:
        if first[0]:
            first[0] = False
            os.write(ready, b"x")

    with open(f"{folder}.log", "a", buffering=1) as log:
        RUNS[framework](folder, log, saved, epochs)


def _warm_up() -> None:
    """One short run of each framework in the zygote itself: lazy imports happen once here."""
    with tempfile.TemporaryDirectory() as scratch:
        for framework in RUNS:
            _train_and_save(framework, Path(scratch) / framework, os.open(os.devnull, os.O_WRONLY), epochs=1)


def main() -> None:
    torch.set_num_threads(1)
    _warm_up()
    for line in sys.stdin:
        framework, folder, delay = line.split()
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:
            os.close(read_end)
            try:
                _train_and_save(framework, Path(folder), write_end)
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
