"""Real checkpoints of the three frameworks, written once per test session (tests/test_cli.py and
tests/test_checkpoint_files_damage.py read and damage copies of them).

A Lightning fit (ProgressTracker + ModelCheckpoint after every optimizer step), an Ignite run
(ProgressHandler + Checkpoint/DiskSaver after every iteration) and an Accelerate run
(AcceleratorProgress + save_state mid-accumulation and at the end), all training Linear(4, 1)
for 2 epochs of 4 batches (10 samples, batch 3), 2 batches per optimizer step; and a real
2-process Accelerate save (tests/helpers/accelerate_save_two_ranks.py). The loader is torchdata's
StatefulDataLoader, so the mid-epoch checkpoints are ones a run resumes at their batch.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import DataLoaderConfiguration
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint, DiskSaver
from pytorch_lightning.callbacks import ModelCheckpoint
from torch.utils.data import TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core.integrations.accelerate import AcceleratorProgress
from tracker_core.integrations.ignite import ProgressHandler
from tracker_core.integrations.lightning import ProgressTracker

from helpers.distributed_runs import TESTS, folder_once, free_port

EPOCHS, SAMPLES, BATCH, ACCUMULATION = 2, 10, 3, 2


def _loader() -> StatefulDataLoader[Any]:
    x = torch.linspace(-1, 1, SAMPLES * 4).reshape(SAMPLES, 4)
    return StatefulDataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=BATCH)


class _Module(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


@dataclass(frozen=True)
class Saved:
    """Where each framework's checkpoints are."""

    lightning: Path  # step=1.ckpt .. step=4.ckpt (one per optimizer step) and final.ckpt
    ignite: Path  # checkpoint_1.pt .. checkpoint_8.pt (one per iteration) and final_checkpoint.pt
    accelerate: Path  # mid/ (after the first batch: mid-accumulation) and end/


def _lightning(folder: Path) -> None:
    torch.manual_seed(0)
    saver = ModelCheckpoint(dirpath=folder, filename="{step}", every_n_train_steps=1, save_top_k=-1)
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=EPOCHS,
        accumulate_grad_batches=ACCUMULATION,
        callbacks=[ProgressTracker(), saver],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(_Module(), _loader())
    trainer.save_checkpoint(folder / "final.ckpt")


def _ignite(folder: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def update(engine: Engine, batch: Any) -> None:
        x, y = batch
        torch.nn.functional.mse_loss(model(x), y).backward()
        if engine.state.iteration % ACCUMULATION == 0:
            optimizer.step()
            optimizer.zero_grad()

    trainer = Engine(update)
    progress = ProgressHandler()
    progress.attach(trainer, optimizers=[optimizer])
    to_save = {"trainer": trainer, "model": model, "optimizer": optimizer, "progress": progress}
    trainer.add_event_handler(Events.ITERATION_COMPLETED, Checkpoint(to_save, DiskSaver(str(folder)), n_saved=None))
    trainer.add_event_handler(
        Events.COMPLETED,
        Checkpoint(
            to_save,
            DiskSaver(str(folder), require_empty=False),
            filename_prefix="final",
            global_step_transform=lambda *_: 0,
        ),
    )
    trainer.run(_loader(), max_epochs=EPOCHS)


def _accelerate(folder: Path) -> None:
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    torch.manual_seed(0)
    accelerator = Accelerator(
        cpu=True,
        gradient_accumulation_steps=ACCUMULATION,
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True),
    )
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)  # a state that changes every step
    model, optimizer, loader = accelerator.prepare(model, optimizer, _loader())
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    with progress.fit(EPOCHS) as fit:
        for epoch in fit.epochs():
            for index, (x, y) in enumerate(progress.train(loader)):
                with accelerator.accumulate(model):
                    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                    optimizer.step()
                    optimizer.zero_grad()
                if epoch == 0 and index == 0:
                    accelerator.save_state(str(folder / "mid"))
    accelerator.save_state(str(folder / "end"))


def saved_checkpoints(factory: pytest.TempPathFactory) -> Saved:
    """The three frameworks' checkpoints, written by the first test of the session that asks."""

    def write(root: Path) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _lightning(root / "lightning")
            _ignite(root / "ignite")
            _accelerate(root / "accelerate")

    root = folder_once(factory, "saved_checkpoints", write)
    return Saved(root / "lightning", root / "ignite", root / "accelerate")


def two_rank_accelerate_folder(factory: pytest.TempPathFactory, main_only: bool = False) -> Path:
    """A ``save_state`` folder written by 2 real processes (gloo), once per session; with ``main_only`` only rank 0
    calls ``save_state`` (the warnings it gave are in the folder's name + ``.warnings``)."""
    name = "world2-main-only" if main_only else "world2"

    def write(root: Path) -> None:
        port = str(free_port())
        processes = []
        for rank in range(2):
            env = dict(
                os.environ,
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
                RANK=str(rank),
                WORLD_SIZE="2",
                LOCAL_RANK=str(rank),
                LOCAL_WORLD_SIZE="2",
                OMP_NUM_THREADS="1",
                PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent)]),
            )
            command = [sys.executable, str(TESTS / "helpers" / "accelerate_save_two_ranks.py"), str(root / name)]
            command += ["main-only"] if main_only else []
            processes.append(subprocess.Popen(command, env=env, cwd=TESTS))
        assert [process.wait(timeout=240) for process in processes] == [0, 0]

    return folder_once(factory, f"two_rank_accelerate_{name}", write) / name
