"""Resume the 2-process checkpoints of tests/helpers/ignite_idist_run.py in one process (world size 1), and one
process's checkpoints on 2 processes; started by tests/test_ignite_elastic.py.

``python ignite_elastic_run.py SAVED OUT``: per case of ``CASES``, fresh objects (``Program``)
whose loader is ``idist.auto_dataloader`` with a ``DistributedSampler(num_replicas=1, rank=0,
shuffle=True)`` and the case's batch size, ``Checkpoint.load_objects`` of
``SAVED/plain-<iteration>.pt``, ``trainer.run()``; what happened (the run's findings, the
warnings, or the error) goes to ``OUT/elastic.pt``, with an uninterrupted one-process run
(batches of 6) under ``"one-process"`` that saves ``OUT/one-<iteration>.pt`` after each
iteration in ``GROW_AT`` and ``ONE_AT``, and the one after ``ONE_AT`` (an epoch's last batch) resumed in one process
(``"one-process-resumed"``). Then an ``idist.Parallel`` of 2 processes (batches of 3 per rank)
resumes each in ``GROW_AT``; each rank writes ``OUT/grow-rank<r>.pt``.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import ignite.distributed as idist
import torch
from ignite.engine import Events
from ignite.handlers import Checkpoint, DiskSaver
from torch.utils.data import DataLoader, DistributedSampler
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import ProgressStateError

from helpers.ignite_idist_run import SAMPLES, Program
from helpers.ignite_program import Indexed
from helpers.rank_exit import exit_rank

# name: (checkpoint iteration, batch size at world size 1, how the loader is made); "stateful" cases resume
# SAVED/stateful-<iteration>.pt into a StatefulDataLoader over the same sampler, the others SAVED/plain-<iteration>.pt
CASES = {
    "mid-epoch-1-batch-6": (3, 6, "sampler"),
    "mid-epoch-1-batch-2": (3, 2, "sampler"),
    "mid-epoch-2-batch-6": (6, 6, "sampler"),
    "mid-epoch-2-batch-2": (6, 2, "sampler"),
    "last-batch-of-epoch-1-batch-2": (4, 2, "sampler"),
    "mid-epoch-1-batch-4": (3, 4, "sampler"),
    "stateful-mid-epoch-1-batch-2": (3, 2, "stateful"),
    "stateful-last-batch-of-epoch-1-batch-2": (4, 2, "stateful"),
    "fewer-batches-per-epoch-batch-12": (6, 12, "sampler"),
    "auto-dataloader-without-sampler": (6, 6, "auto"),
    "loader-not-given-to-attach": (6, 6, "not given"),
}
GROW_AT = (2, 6)  # one process, batches of 6 (4 per epoch): mid epoch 1 and mid epoch 2, position 12 of 24
ONE_AT = 4  # the one-process run's last batch of epoch 1: its plain loader resumes exactly in one process


def _loader(batch: int, how: str) -> DataLoader[Any]:
    dataset = Indexed(SAMPLES)
    if how == "auto":
        return idist.auto_dataloader(dataset, batch_size=batch, shuffle=True)  # a RandomSampler at world size 1
    sampler = DistributedSampler(dataset, num_replicas=idist.get_world_size(), rank=idist.get_rank(), shuffle=True)
    if how == "stateful":
        return StatefulDataLoader(dataset, batch_size=batch, sampler=sampler)
    # auto_dataloader's batch_size is the global one: it divides it by the world size.
    return idist.auto_dataloader(dataset, batch_size=batch * idist.get_world_size(), sampler=sampler)


def _resume(saved: Path, batch: int, how: str) -> dict[str, Any]:
    program = Program("plain", seed=1234, loader=_loader(batch, how), attach_loader=how != "not given")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            Checkpoint.load_objects(program.to_save(), str(saved))
            found = program.run()
        except (ProgressStateError, ValueError) as error:
            found = {
                "error": [type(error).__name__, getattr(error, "key", None), str(error)],
                "seen": program.seen,
                "ignite": {
                    "iteration": program.trainer.state.iteration,
                    "epoch_length": program.trainer.state.epoch_length,
                },
            }
    found["warnings"] = [[w.category.__name__, str(w.message)] for w in caught if "elastic" in str(w.message)]
    return found


def _one_process(out: Path) -> dict[str, Any]:
    program = Program("plain", seed=0, loader=_loader(6, "sampler"))
    checkpoint = Checkpoint(
        program.to_save(),
        DiskSaver(str(out), require_empty=False),
        n_saved=None,
        filename_pattern="one-{global_step}.pt",
        global_step_transform=lambda engine, _: engine.state.iteration,
    )
    program.trainer.add_event_handler(
        Events.ITERATION_COMPLETED(event_filter=lambda _, i: i in (*GROW_AT, ONE_AT)), checkpoint
    )
    return program.run()


def _grow(local_rank: int, out: Path) -> None:
    runs = {}
    for iteration in GROW_AT:
        program = Program("plain", seed=1234, loader=_loader(3, "sampler"))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            Checkpoint.load_objects(program.to_save(), str(out / f"one-{iteration}.pt"))
            runs[iteration] = program.run()
        runs[iteration]["warnings"] = [
            [w.category.__name__, str(w.message)] for w in caught if "elastic" in str(w.message)
        ]
    torch.save(runs, out / f"grow-rank{idist.get_rank()}.pt")
    exit_rank()


def main(saved: Path, out: Path) -> None:
    found = {
        name: _resume(saved / f"{'stateful' if how == 'stateful' else 'plain'}-{at}.pt", batch, how)
        for name, (at, batch, how) in CASES.items()
    }
    found["one-process"] = _one_process(out)
    found["one-process-resumed"] = _resume(out / f"one-{ONE_AT}.pt", 6, "sampler")  # at its own world size
    torch.save(found, out / "elastic.pt")
    with idist.Parallel(backend="gloo", nproc_per_node=2) as parallel:
        parallel.run(_grow, out)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
