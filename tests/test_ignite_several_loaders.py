"""Several train loaders in one Ignite epoch: per-loader progress and an exact resume, or a warning naming them.

``RoundRobin(a, b)`` gives the trainer a batch of each shuffled loader in turn (``a`` has 4
batches, ``b`` 2, so ``a`` finishes the epoch alone). With StatefulDataLoaders, a Checkpoint after every iteration
of the uninterrupted 2-epoch run is resumed into fresh objects and compared with it:
weights ``torch.equal``, the sample ids of every later step, the full progress state (with
its per-loader counts). Plain DataLoaders resumed mid-epoch follow Ignite's own rule (warned). A combination the
user writes is not a DataLoader: its mid-epoch checkpoint warns, naming it.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ignite")
pytest.importorskip("torchdata")

import torch
from ignite.engine import Engine, Events, create_supervised_trainer
from ignite.handlers import Checkpoint, DiskSaver
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import InexactResumeWarning
from tracker_core.integrations.ignite import ProgressHandler, RoundRobin

from helpers.ignite_oracle import Oracle
from helpers.ignite_program import Indexed
from helpers.ledger import without_ledger

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")

EPOCHS = 2
PER_EPOCH = 6  # 4 batches of loader 0, 2 of loader 1


class Offset(Indexed):
    """Sample ids from 100 on, so the two loaders' samples are told apart."""

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        x, y, i = super().__getitem__(index)
        return x, y, 100 + i


@dataclass
class Program:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    trainer: Engine
    progress: ProgressHandler
    data: Any
    seen: list[list[int]] = field(default_factory=list)

    def to_save(self) -> dict[str, Any]:
        return {"trainer": self.trainer, "model": self.model, "optimizer": self.optimizer, "progress": self.progress}


def _build(seed: int, data: Any = None, kind: type[DataLoader[Any]] = DataLoader) -> Program:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5), torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    seen: list[list[int]] = []

    def prepare(batch: Any, device: Any = None, non_blocking: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        seen.append(batch[2].tolist())
        return batch[0], batch[1]

    trainer = create_supervised_trainer(model, optimizer, torch.nn.MSELoss(), prepare_batch=prepare)
    progress = ProgressHandler()
    progress.attach(trainer, optimizers=[optimizer])
    if data is None:
        data = RoundRobin(  # built before any load: a shuffling StatefulDataLoader draws the global RNG
            kind(Indexed(11), batch_size=3, shuffle=True),
            kind(Offset(5, seed=2), batch_size=3, shuffle=True),
        )
    return Program(model, optimizer, trainer, progress, data, seen)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Program, Path]:
    folder = tmp_path_factory.mktemp("round_robin")
    program = _build(seed=0, kind=StatefulDataLoader)  # positioned by their own states: exact at every batch
    checkpoint = Checkpoint(
        program.to_save(), DiskSaver(str(folder), require_empty=False), n_saved=None,
        filename_pattern="{global_step}.pt", global_step_transform=lambda engine, _: engine.state.iteration,
    )  # fmt: skip
    program.trainer.add_event_handler(Events.ITERATION_COMPLETED, checkpoint)
    program.trainer.run(program.data, max_epochs=EPOCHS)
    return program, folder


def test_each_loader_of_a_round_robin_has_its_own_batch_and_sample_counts(reference: tuple[Program, Path]) -> None:
    program, _ = reference
    first, second = program.progress.view.train.dataloaders
    assert (first.batches.lifetime, second.batches.lifetime) == (4 * EPOCHS, 2 * EPOCHS)
    assert (first.samples.lifetime, second.samples.lifetime) == (11 * EPOCHS, 5 * EPOCHS)
    assert [ids[0] >= 100 for ids in program.seen[:PER_EPOCH]] == [False, True, False, True, False, False]


def test_the_oracle_finds_the_view_following_engine_state_with_a_round_robin() -> None:
    program = _build(seed=0)
    oracle = Oracle(program.progress, program.trainer, [program.optimizer])
    program.trainer.run(program.data, max_epochs=EPOCHS)
    assert oracle.disagreements == [] and program.trainer.state.iteration == EPOCHS * PER_EPOCH


@pytest.mark.filterwarnings("error::tracker_core.InexactResumeWarning")
@pytest.mark.parametrize("iteration", [1, 2, 3, 5, 6, 7, 8, 10, 11])
def test_resume_of_a_round_robin_of_stateful_dataloaders_matches_the_uninterrupted_run(
    iteration: int, reference: tuple[Program, Path]
) -> None:
    program, folder = reference
    resumed = _build(seed=1234, kind=StatefulDataLoader)
    Checkpoint.load_objects(resumed.to_save(), str(folder / f"{iteration}.pt"))
    resumed.trainer.run(resumed.data)
    for name, weight in program.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], weight), name
    assert resumed.seen == program.seen[iteration:]
    assert without_ledger(resumed.progress.view.state_dict()) == without_ledger(program.progress.view.state_dict())


@pytest.mark.parametrize("iteration", [1, 3, 5, 8])
def test_a_round_robin_of_plain_dataloaders_resumed_mid_epoch_follows_ignites_rule_and_its_counters(
    iteration: int, tmp_path: Path
) -> None:
    # Ignite's rule: a fresh iter(data) for the epoch's remaining turns; each plain loader reads from its first batch.
    program = _build(seed=0)
    checkpoint = Checkpoint(program.to_save(), DiskSaver(str(tmp_path)), filename_pattern="{name}.pt")
    program.trainer.add_event_handler(Events.ITERATION_COMPLETED(once=iteration), checkpoint)
    with pytest.warns(InexactResumeWarning, match=r"saving DataLoader over \w+ .*an epoch.*StatefulDataLoader"):
        program.trainer.run(program.data, max_epochs=EPOCHS)
    resumed = _build(seed=1234)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", "'set_vital' is deprecated")
        Checkpoint.load_objects(resumed.to_save(), str(tmp_path / "checkpoint.pt"))
        oracle = Oracle(resumed.progress, resumed.trainer, [resumed.optimizer])
        resumed.trainer.run(resumed.data)
    assert oracle.checks and oracle.disagreements == []
    assert caught and all(w.category is InexactResumeWarning for w in caught)
    assert all(re.match(r"resuming DataLoader over \w+ .*an epoch", str(w.message)) for w in caught)
    assert resumed.trainer.state.iteration == EPOCHS * PER_EPOCH
    assert len(resumed.seen) == EPOCHS * PER_EPOCH - iteration
    first, second = resumed.progress.view.train.dataloaders  # each loader's count as in the uninterrupted run
    assert (first.batches.lifetime, second.batches.lifetime) == (4 * EPOCHS, 2 * EPOCHS)
    for loader in resumed.data.loaders:  # nothing installed on the loaders
        assert "_get_iterator" not in vars(loader)


class _Alternating:
    """A combination written by the user: not a DataLoader, so its position cannot be saved."""

    def __init__(self, *loaders: DataLoader[Any]) -> None:
        self.loaders = loaders

    def __len__(self) -> int:
        return sum(len(loader) for loader in self.loaders)

    def __iter__(self) -> Any:
        for batches in zip(*self.loaders, strict=False):
            yield from batches


def test_a_mid_epoch_checkpoint_of_a_users_own_combination_warns_naming_it() -> None:
    data = _Alternating(DataLoader(Indexed(6), batch_size=3), DataLoader(Offset(6), batch_size=3))
    program = _build(seed=0, data=data)
    program.trainer.add_event_handler(Events.ITERATION_COMPLETED(once=2), lambda: program.progress.state_dict())
    with pytest.warns(InexactResumeWarning, match="_Alternating"):
        program.trainer.run(data, max_epochs=1)
