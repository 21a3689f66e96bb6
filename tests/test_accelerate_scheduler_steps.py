"""Accelerate: every step a prepared scheduler's torch scheduler takes is a scheduler step, through save_state."""

from __future__ import annotations

import gc
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("accelerate")

import torch
from accelerate.accelerator import Accelerator
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core.integrations.accelerate import AcceleratorProgress

from helpers.accelerate_drive import Indexed, Setup, fresh_accelerator

SETUP = Setup(samples=10, batch_size=3, accumulation=2, epochs=3, stateful=True)  # 4 batches an epoch, 2 steps


@dataclass
class Program:
    accelerator: Accelerator
    progress: AcceleratorProgress
    scheduler: torch.optim.lr_scheduler.StepLR  # the torch scheduler inside the prepared one

    @property
    def scheduler_steps(self) -> int:
        return self.progress.view.train.scheduler_steps.lifetime


def _run(save_after: int | None = None, folder: Path | None = None, load: Path | None = None) -> Program:
    """Train SETUP, stepping the prepared scheduler after each optimizer.step(); with ``save_after``,
    save_state after that many train batches (of the run) and stop."""
    accelerator = fresh_accelerator(SETUP)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    # a StatefulDataLoader: the mid-epoch save resumes at its batch
    data: DataLoader[Any] = StatefulDataLoader(Indexed(SETUP.samples), batch_size=SETUP.batch_size, shuffle=True)
    model, optimizer, loader, prepared = accelerator.prepare(model, optimizer, data, scheduler)  # type: ignore[no-untyped-call]
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    progress.track_train_loader(loader)
    if load is not None:
        accelerator.load_state(str(load))
    program = Program(accelerator, progress, prepared.scheduler)
    batches = 0
    with progress.fit(SETUP.epochs) as fit:
        for _ in fit.epochs():
            for _, x, y in progress.train(loader):
                with accelerator.accumulate(model):
                    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))  # type: ignore[no-untyped-call]
                    optimizer.step()
                    prepared.step()
                    optimizer.zero_grad()
                batches += 1
                if batches == save_after:
                    accelerator.save_state(str(folder))
                    return program
    return program


def test_scheduler_steps_equal_the_last_epoch_of_the_prepared_scheduler() -> None:
    program = _run()
    assert program.scheduler.last_epoch == 2 * SETUP.epochs  # stepped with the optimizer: 2 an epoch
    assert program.scheduler_steps == program.scheduler.last_epoch


def test_scheduler_steps_survive_a_mid_epoch_save_and_load_state(tmp_path: Path) -> None:
    saved = _run(save_after=7, folder=tmp_path / "state")  # epoch 2, batch 3: mid-accumulation
    assert saved.scheduler_steps == saved.scheduler.last_epoch == 3
    resumed = _run(load=tmp_path / "state")
    assert resumed.scheduler_steps == resumed.scheduler.last_epoch
    assert resumed.progress.view.train.scheduler_steps == _run().progress.view.train.scheduler_steps


def test_the_scheduler_the_user_drops_with_the_accelerator_is_freed_while_its_record_lives() -> None:
    program = _run()
    view = program.progress.view  # the AcceleratorProgress holds its accelerator, and so what it prepared
    refs = [weakref.ref(program.scheduler), weakref.ref(program.accelerator)]
    del program
    gc.collect()
    assert [ref() for ref in refs] == [None, None]
    assert view.train.scheduler_steps.lifetime == 2 * SETUP.epochs
