"""An Ignite program on 2 processes with ``ignite.distributed`` (gloo), started by tests/test_ignite_distributed.py.

``python ignite_idist_run.py DIR``: one ``idist.Parallel`` trains, per configuration, 2
uninterrupted epochs with a ``Checkpoint`` through a ``RankFilesSaver`` (written by rank 0 to
``DIR/<config>-<iteration>.pt``, each rank's entry in ``<file>.ranks/``)
after each iteration in ``AT[config]``; then a second ``idist.Parallel`` (fresh processes)
resumes each checkpoint into fresh objects with ``Checkpoint.load_objects``, noting the ``InexactResumeWarning``s.
The loader is ``idist.auto_dataloader`` (a shuffling ``DistributedSampler``), or for ``STATEFUL`` configurations a
StatefulDataLoader over the same sampler; the model ``idist.auto_model`` (DDP). Each rank seeds its global
RNG differently (the model has dropout), so a rank resumed with another rank's RNG state
would diverge. Each rank saves what it saw to ``DIR/<phase>-rank<r>.pt``, with Ignite's
counters next to the tracker's at STARTED and each EPOCH_COMPLETED. Last, a run whose ranks
get different amounts of data records what ``check_divergence`` says.
tests/helpers/ignite_elastic_run.py resumes the checkpoints at world size 1.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import ignite.distributed as idist
import torch
from ignite.engine import Engine, Events, create_supervised_trainer
from ignite.handlers import Checkpoint
from torch.utils.data import DataLoader, DistributedSampler
from torchdata.stateful_dataloader import StatefulDataLoader

import tracker_core
from tracker_core import InexactResumeWarning
from tracker_core.integrations.ignite import ProgressHandler, RankFilesSaver

from helpers.ignite_program import Indexed
from helpers.rank_exit import exit_rank

SAMPLES = 24  # 12 per rank: 4 batches of 3 per rank and epoch
EPOCHS = 2
ACCUMULATE = {"plain": 1, "stateful": 1, "accumulate": 3}  # configurations: gradient_accumulation_steps
STATEFUL = ("stateful", "accumulate")  # configurations whose loader is a StatefulDataLoader (exact at every batch)
AT = {
    "plain": (1, 3, 4, 6),  # iterations: first batch, mid epoch, last batch of epoch 1, mid epoch 2
    "stateful": (1, 3, 4, 6),
    "accumulate": (2, 4),  # inside a window (DDP all-reduces every backward: the ranks' partial sums agree)
}


class Program:
    """One rank's objects, as a new process makes them; ``seen`` lists the sample ids of every step.

    ``loader`` replaces the default ``idist.auto_dataloader``; it is given to ``attach`` unless
    ``attach_loader`` is False. ``agreement`` lists Ignite's counters next to the tracker's.
    """

    def __init__(
        self, config: str, seed: int, loader: DataLoader[Any] | None = None, attach_loader: bool = True
    ) -> None:
        torch.manual_seed(seed + idist.get_rank())
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5), torch.nn.Linear(4, 1))
        self.model = idist.auto_model(model)
        self.optimizer = idist.auto_optim(torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9))
        if loader is None and config in STATEFUL:  # what idist.auto_dataloader builds, with a state of its own
            data = Indexed(SAMPLES)
            sampler = DistributedSampler(data, idist.get_world_size(), idist.get_rank(), shuffle=True)
            loader = StatefulDataLoader(data, batch_size=3, sampler=sampler)
        elif loader is None:
            loader = idist.auto_dataloader(Indexed(SAMPLES), batch_size=3 * idist.get_world_size(), shuffle=True)
        self.loader = loader
        self.seen: list[list[int]] = []
        self.agreement: list[dict[str, Any]] = []

        def prepare(batch: Any, device: Any = None, non_blocking: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
            self.seen.append(batch[2].tolist())
            return batch[0], batch[1]

        self.trainer = create_supervised_trainer(
            self.model,
            self.optimizer,
            torch.nn.MSELoss(),
            prepare_batch=prepare,
            gradient_accumulation_steps=ACCUMULATE[config],
        )
        self.trainer.add_event_handler(Events.EPOCH_STARTED, self._set_epoch)
        self.progress = ProgressHandler()
        given = self.loader if attach_loader else None
        self.progress.attach(self.trainer, optimizers=[self.optimizer], dataloader=given)
        self.trainer.add_event_handler(Events.STARTED | Events.EPOCH_COMPLETED, self._note_counters)

    def _set_epoch(self, engine: Engine) -> None:
        self.loader.sampler.set_epoch(engine.state.epoch - 1)  # what Ignite's distributed examples do

    def _note_counters(self, engine: Engine) -> None:
        """Ignite's counters next to the tracker's, at STARTED and each EPOCH_COMPLETED."""
        view = tracker_core.get_progress(engine)
        self.agreement.append(
            {
                "ignite": [engine.state.iteration, engine.state.epoch, engine.state.epoch_length],
                "expected": [view.train.batches.run.completed, view.train.epochs.run.completed, len(self.loader)],
                "epoch_batches": view.train.batches.epoch.completed,
            }
        )

    def to_save(self) -> dict[str, Any]:
        return {"trainer": self.trainer, "model": self.model, "optimizer": self.optimizer, "progress": self.progress}

    def run(self) -> dict[str, Any]:
        self.trainer.run(self.loader, max_epochs=EPOCHS)
        view = tracker_core.get_progress(self.trainer)
        state = self.trainer.state
        return {
            "rank": idist.get_rank(),
            "sampler": type(self.loader.sampler).__name__,
            "shuffle": bool(getattr(self.loader.sampler, "shuffle", False)),
            "seen": self.seen,
            "weights": [p.detach().clone() for p in self.model.parameters()],
            "progress": view.state_dict(),
            "ignite": {"iteration": state.iteration, "epoch": state.epoch, "epoch_length": state.epoch_length},
            "agreement": self.agreement,
            "mapping": view.resume_mapping,
            "tracker": {
                "global_step": view.global_step,
                "batches": view.train.batches.run.completed,
                "epochs": view.train.epochs.run.completed,
                "samples": view.train.samples.run,
            },
            "sum": tracker_core.reduce_state(view, "sum"),
            "min": tracker_core.reduce_state(view, "min"),
            "max": tracker_core.reduce_state(view, "max"),
            "divergence": [str(d) for d in tracker_core.check_divergence(view)],
        }


def _straight(local_rank: int, folder: Path) -> None:
    runs = {}
    for config, at in AT.items():
        program = Program(config, seed=0)
        checkpoint = Checkpoint(
            program.to_save(),
            RankFilesSaver(str(folder), require_empty=False),  # each rank's entry in its own file
            n_saved=None,
            filename_pattern=f"{config}-{{global_step}}.pt",
            global_step_transform=lambda engine, _: engine.state.iteration,
        )
        saving = Events.ITERATION_COMPLETED(event_filter=lambda _, i, at=at: i in at)
        program.trainer.add_event_handler(saving, checkpoint)
        runs[config] = program.run()
    torch.save(runs, folder / f"straight-rank{idist.get_rank()}.pt")
    _uneven(folder)
    exit_rank()


def _uneven(folder: Path) -> None:
    """Each rank its own data, rank 1 a batch more per epoch (no DDP, so nothing hangs): checked at the epoch end."""
    rank = idist.get_rank()
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

    def features(batch: Any, device: Any = None, non_blocking: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        return batch[0], batch[1]

    trainer = create_supervised_trainer(model, optimizer, torch.nn.MSELoss(), prepare_batch=features)
    ProgressHandler().attach(trainer, optimizers=[optimizer])
    found: list[list[str]] = []

    def check(engine: Engine) -> None:
        found.append([str(d) for d in tracker_core.check_divergence(tracker_core.get_progress(engine))])

    trainer.add_event_handler(Events.EPOCH_COMPLETED, check)
    trainer.run(torch.utils.data.DataLoader(Indexed(6 + 3 * rank), batch_size=3), max_epochs=1)
    torch.save(found, folder / f"uneven-rank{rank}.pt")


def _resume(local_rank: int, folder: Path) -> None:
    runs = {}
    for config, at in AT.items():
        for iteration in at:
            program = Program(config, seed=1234)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", InexactResumeWarning)
                Checkpoint.load_objects(program.to_save(), str(folder / f"{config}-{iteration}.pt"))
                runs[f"{config}-{iteration}"] = program.run()
            runs[f"{config}-{iteration}"]["warnings"] = [
                str(w.message) for w in caught if issubclass(w.category, InexactResumeWarning)
            ]
    torch.save(runs, folder / f"resume-rank{idist.get_rank()}.pt")
    exit_rank()


def main(folder: Path) -> None:
    for phase in (_straight, _resume):
        with idist.Parallel(backend="gloo", nproc_per_node=2) as parallel:
            parallel.run(phase, folder)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
