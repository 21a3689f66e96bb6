"""A training process to kill with SIGKILL and resume: ``make demo`` and the crash tests start it.

    python examples/crash_safe_training.py FRAMEWORK WORKDIR IDS_FILE [--resume]

Trains ``Linear(4, 1)`` with input dropout (the global RNG matters) on 10 samples that carry
their id, in batches of 3 (4 an epoch, the last of 1), 3 epochs, gradient accumulation 2,
SGD with momentum, under FRAMEWORK (lightning, ignite, accelerate). The framework's own
rotating checkpointer writes into ``WORKDIR/checkpoints`` after every optimizer step
(Lightning's ``ModelCheckpoint``) or every batch (Ignite's ``Checkpoint(n_saved=3)``,
Accelerate's ``save_state`` with ``total_limit=3``). The tracker keeps its heartbeat in
``WORKDIR/heartbeat.json`` (``heartbeat=``), so a resume records the work the killed run lost. At the start of every train step the
step's sample ids go to IDS_FILE as one JSON line (one ``write``, then ``fsync``: a kill
loses no line and leaves no half line) and ``batch <n>`` is printed (n counts this process's
steps). With ``--resume`` it first resumes from the newest intact checkpoint
(``newest_intact_checkpoint``), leaving damaged ones in place. At the end it writes
``WORKDIR/result.pt``: final weights, progress state, the checkpoint it resumed from.
"""

from __future__ import annotations

import json
import os
import random
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

import tracker_core
from tracker_core.checkpoints import newest_intact_checkpoint

SAMPLES, BATCH_SIZE, EPOCHS, ACCUMULATION = 10, 3, 3, 2
BATCHES_PER_EPOCH = -(-SAMPLES // BATCH_SIZE)
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


def checkpoints(workdir: Path) -> Path:
    """The folder that holds the checkpoints (Accelerate's automatic ones go to ``<project_dir>/checkpoints``)."""
    return workdir / "checkpoints"


def _seed(value: int) -> None:
    torch.manual_seed(value)
    random.seed(value)
    np.random.seed(value)


def _model() -> torch.nn.Linear:
    torch.manual_seed(0)  # the same initial weights in every process
    return torch.nn.Linear(4, 1)


def _optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def _loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.mse_loss(model(torch.nn.functional.dropout(x, 0.2, training=True)), y)


def _loader() -> StatefulDataLoader[Any]:
    """A shuffled loader with a position of its own, so a checkpoint inside an epoch resumes at its batch."""
    return StatefulDataLoader(Indexed(), batch_size=BATCH_SIZE, shuffle=True)


def train_lightning(workdir: Path, resume_from: Path | None, seed: int, record: Record) -> tuple[torch.nn.Module, Any]:
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import ModelCheckpoint

    from tracker_core.integrations.lightning import ProgressTracker

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = _model()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y, ids = batch
            record(ids.tolist())
            return _loss(self.layer, x, y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return _optimizer(self.layer)

    module = Module()
    _seed(seed)
    saving = ModelCheckpoint(dirpath=checkpoints(workdir), filename="{step}", every_n_train_steps=1, save_top_k=-1)
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=EPOCHS,
        accumulate_grad_batches=ACCUMULATION,
        limit_val_batches=0,
        enable_progress_bar=False,
        logger=False,
        enable_model_summary=False,
        callbacks=[ProgressTracker(heartbeat=workdir / "heartbeat.json"), saving],
    )
    trainer.fit(module, _loader(), ckpt_path=None if resume_from is None else str(resume_from), weights_only=True)
    return module.layer, trainer


def train_ignite(workdir: Path, resume_from: Path | None, seed: int, record: Record) -> tuple[torch.nn.Module, Any]:
    from ignite.engine import Engine, Events
    from ignite.handlers import Checkpoint, DiskSaver

    from tracker_core.integrations.ignite import ProgressHandler

    model = _model()
    optimizer = _optimizer(model)
    _seed(seed)

    def step(engine: Engine, batch: Any) -> None:
        x, y, ids = batch
        record(ids.tolist())
        torch.autograd.backward(_loss(model, x, y) / ACCUMULATION)
        in_epoch = (engine.state.iteration - 1) % BATCHES_PER_EPOCH + 1
        if in_epoch % ACCUMULATION == 0 or in_epoch == BATCHES_PER_EPOCH:  # Lightning's and Accelerate's rule
            optimizer.step()
            optimizer.zero_grad()

    trainer = Engine(step)
    progress = ProgressHandler(heartbeat=workdir / "heartbeat.json")
    progress.attach(trainer, optimizers=[optimizer])
    to_save = {"trainer": trainer, "model": model, "optimizer": optimizer, "progress": progress}
    saving = Checkpoint(
        to_save,
        DiskSaver(str(checkpoints(workdir)), require_empty=False),
        n_saved=3,
        global_step_transform=lambda e, _: e.state.iteration,
    )
    trainer.add_event_handler(Events.ITERATION_COMPLETED, saving)
    loader = _loader()  # before the load: building a shuffled loader draws the global RNG
    if resume_from is not None:
        Checkpoint.load_objects(to_save, str(resume_from))
    trainer.run(loader, max_epochs=EPOCHS)
    return model, trainer


def train_accelerate(workdir: Path, resume_from: Path | None, seed: int, record: Record) -> tuple[torch.nn.Module, Any]:
    from accelerate.accelerator import Accelerator
    from accelerate.utils.dataclasses import DataLoaderConfiguration, ProjectConfiguration

    from tracker_core.integrations.accelerate import AcceleratorProgress

    project = ProjectConfiguration(project_dir=str(workdir), automatic_checkpoint_naming=True, total_limit=3)
    accelerator = Accelerator(
        cpu=True,
        gradient_accumulation_steps=ACCUMULATION,
        project_config=project,
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True),  # save_state keeps its position
    )
    model = _model()
    optimizer = _optimizer(model)
    _seed(seed)
    model, optimizer, train = accelerator.prepare(model, optimizer, _loader())  # type: ignore[no-untyped-call]
    progress = AcceleratorProgress(accelerator, heartbeat=workdir / "heartbeat.json")
    accelerator.register_for_checkpointing(progress)
    progress.track_train_loader(train)
    if resume_from is not None:
        accelerator.load_state(str(resume_from))
        accelerator.project_configuration.iteration = progress.next_save_iteration  # the next checkpoint_N
    with progress.fit(EPOCHS) as fit:
        for _ in fit.epochs():
            for x, y, ids in fit.train(train):
                record(ids.tolist())
                with accelerator.accumulate(model):
                    accelerator.backward(_loss(model, x, y))  # type: ignore[no-untyped-call]
                    optimizer.step()
                    optimizer.zero_grad()
                accelerator.save_state()
    return model, accelerator


TRAIN = {"lightning": train_lightning, "ignite": train_ignite, "accelerate": train_accelerate}


def main(framework: str, workdir: Path, ids_file: Path, resume: bool) -> None:
    resume_from = newest_intact_checkpoint(checkpoints(workdir)) if resume else None
    descriptor = os.open(ids_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    steps = 0

    def record(ids: list[int]) -> None:
        nonlocal steps
        os.write(descriptor, (json.dumps(ids) + "\n").encode())
        os.fsync(descriptor)
        steps += 1
        print(f"batch {steps}", flush=True)

    seed = 1234 if resume else 0  # the global RNGs' seed, set after the model: a resume must not depend on it
    model, owner = TRAIN[framework](workdir, resume_from, seed, record)
    os.close(descriptor)
    torch.save(
        {
            "weights": [p.detach().clone() for p in model.parameters()],
            "progress": tracker_core.get_progress(owner).state_dict(),
            "resumed_from": "" if resume_from is None else str(resume_from),
        },
        workdir / "result.pt",
    )


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    warnings.simplefilter("error", tracker_core.InexactResumeWarning)  # a resume that would not be exact fails
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), resume="--resume" in sys.argv[4:])
