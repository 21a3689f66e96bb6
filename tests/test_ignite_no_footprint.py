"""An uninterrupted run with the ProgressHandler is bit-identical to the same run without it, and leaves the same
files.

Same seed, same objects; one run has the handler (and its checkpoints), the other not.
Dropout draws from the global RNG, the train DataLoader shuffles (its sampler seed comes
from the global RNG at every epoch), an evaluator runs after every epoch, and a Checkpoint
is written after every iteration in both runs. Compared: the weights (``torch.equal``), the
sample ids of every step, and the global RNG states (torch, Python, NumPy) after every
iteration and at the end.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

pytest.importorskip("ignite")

import numpy as np
import torch
from ignite.engine import Events, create_supervised_evaluator, create_supervised_trainer
from ignite.handlers import Checkpoint, DiskSaver
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core.integrations.ignite import ProgressHandler

from helpers.ignite_program import BATCH, EPOCHS, TRAIN_SIZE, VAL_SIZE, Indexed


@dataclass
class Run:
    weights: dict[str, torch.Tensor]
    seen: list[list[int]] = field(default_factory=list)
    rng_after_each_step: list[tuple[Any, ...]] = field(default_factory=list)
    rng_at_end: tuple[Any, ...] = ()


def _rng() -> tuple[Any, ...]:
    numpy_state = cast(tuple[Any, ...], np.random.get_state())
    return (torch.get_rng_state().tolist(), random.getstate(), numpy_state[1].tolist(), numpy_state[2:])


def _train(folder: Path, tracked: bool, workers: int, stateful: bool, accumulation: int) -> Run:
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    run = Run(weights={})

    def prepare(batch: Any, device: Any = None, non_blocking: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        if model.training:
            run.seen.append(batch[2].tolist())
        return batch[0], batch[1]

    trainer = create_supervised_trainer(
        model, optimizer, torch.nn.MSELoss(), prepare_batch=prepare, gradient_accumulation_steps=accumulation
    )
    evaluator = create_supervised_evaluator(model, prepare_batch=prepare)
    kind = StatefulDataLoader if stateful else DataLoader
    loader = kind(Indexed(TRAIN_SIZE), batch_size=BATCH, shuffle=True, num_workers=workers)
    val_loader = DataLoader(Indexed(VAL_SIZE, seed=1), batch_size=2, shuffle=True)
    to_save: dict[str, Any] = {"trainer": trainer, "model": model, "optimizer": optimizer}
    if tracked:
        progress = ProgressHandler()
        progress.attach(trainer, optimizers=[optimizer])
        progress.attach(evaluator, stage="validate")
        to_save["progress"] = progress
    trainer.add_event_handler(Events.ITERATION_COMPLETED, Checkpoint(to_save, DiskSaver(str(folder)), n_saved=1))
    trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda: run.rng_after_each_step.append(_rng()))
    trainer.add_event_handler(Events.EPOCH_COMPLETED, lambda: evaluator.run(val_loader))
    trainer.run(loader, max_epochs=EPOCHS)
    run.weights = {name: value.clone() for name, value in model.state_dict().items()}
    run.rng_at_end = _rng()
    return run


@pytest.mark.parametrize(
    ("workers", "stateful", "accumulation"),
    [(0, False, 1), (2, False, 2), (0, True, 3)],
    ids=["plain", "workers2-accumulate2", "stateful-accumulate3"],
)
def test_a_run_with_the_handler_is_bit_identical_to_the_same_run_without_it(
    tmp_path: Path, workers: int, stateful: bool, accumulation: int
) -> None:
    without = _train(tmp_path / "without", False, workers, stateful, accumulation)
    tracked = _train(tmp_path / "with", True, workers, stateful, accumulation)
    assert tracked.seen == without.seen and len(without.seen) == EPOCHS * 4
    for name, weight in without.weights.items():
        assert torch.equal(tracked.weights[name], weight), name
    assert tracked.rng_after_each_step == without.rng_after_each_step
    assert tracked.rng_at_end == without.rng_at_end


def _names(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


def test_the_disk_saver_folder_holds_the_same_names_with_and_without_the_handler(tmp_path: Path) -> None:
    _train(tmp_path / "without", False, workers=0, stateful=False, accumulation=1)
    _train(tmp_path / "with", True, workers=0, stateful=False, accumulation=1)
    assert _names(tmp_path / "with") == _names(tmp_path / "without") == [f"checkpoint_{EPOCHS * 4}.pt"]
