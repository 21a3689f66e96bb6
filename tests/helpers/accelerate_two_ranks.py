"""One rank of the 2-process Accelerate tests (gloo on 127.0.0.1; RANK etc. set by the test).

``argv[3]`` is ``stateful`` (``use_stateful_dataloader=True`` and ``use_seedable_sampler=True``: stopped mid-epoch),
``torchdata`` (that, over a ``StatefulDataLoader``) or ``seedable``
(a plain loader, ``use_seedable_sampler=True``: stopped between epochs): the program runs uninterrupted, then stopped
after ``save_state``, then resumed by ``load_state``;
this rank's findings and the summed progress go to ``argv[2]`` (json).

``argv[3] == "elastic"``: :func:`elastic_run` (also run by the 1-process side of
tests/test_accelerate_elastic.py) uninterrupted, stopped after ``save_state`` into ``argv[1]``
(after 2 batches of epoch 1) and ``argv[1]_end`` (after its last batch), and resumed from the
1-process checkpoint ``argv[4]``; the findings go to ``argv[2]`` (torch).
"""

from __future__ import annotations

import json
import sys
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader

import tracker_core
from tracker_core import InexactResumeWarning
from tracker_core.integrations.accelerate import AcceleratorProgress

from helpers.accelerate_drive import Indexed, Setup, StopAt, fresh_accelerator, run, seed
from helpers.rank_exit import exit_rank

ELASTIC_SAMPLES = 24
ELASTIC_EPOCHS = 3
ELASTIC_STOP = (1, 2)  # save after 2 batches of epoch 1 (an accumulation window ends there)


@dataclass(frozen=True)
class Elastic:
    """The prepared program of :func:`elastic_run`."""

    accelerator: Accelerator
    model: torch.nn.Module
    optimizer: Any
    loader: Any
    progress: AcceleratorProgress


def elastic_setup(batch: int, *, seedable: bool = True, split_batches: bool = False, stateful: bool = False) -> Elastic:
    """Linear(4, 1) on ``Indexed(24)``, batches of ``batch`` per process, accumulation 2, prepared and tracked.

    ``stateful``: ``use_stateful_dataloader=True`` (Accelerate prepares a StatefulDataLoader).
    """
    seed(0)  # SeedableRandomSampler's initial_seed: the same in every process and run
    accelerator = fresh_accelerator(Setup(samples=ELASTIC_SAMPLES, batch_size=batch, accumulation=2, seedable=seedable))
    accelerator.dataloader_config.split_batches = split_batches
    accelerator.dataloader_config.use_stateful_dataloader = stateful
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(Indexed(ELASTIC_SAMPLES), batch_size=batch, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    progress.track_train_loader(loader)
    return Elastic(accelerator, model, optimizer, loader, progress)


def elastic_run(
    batch: int, *, stop: tuple[int, int] | None = None, save_dir: str | None = None, load_dir: str | None = None
) -> dict[str, Any]:
    """:func:`elastic_setup`, trained 3 epochs (no dropout), from ``load_dir`` if given.

    Stops right after ``save_state`` at ``stop`` = (epoch, batches of it trained). Returns per
    trained batch its epoch, sample ids and Accelerate's counters beside the tracker's, plus
    the final weights and counters, the resume mapping and the InexactResumeWarnings of the load.
    """
    program = elastic_setup(batch)
    accelerator, view = program.accelerator, program.progress.view
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", InexactResumeWarning)
        if load_dir is not None:
            accelerator.load_state(load_dir)
    batches = _train_elastic(program, stop, save_dir)
    return {
        "rank": accelerator.process_index,
        "world": accelerator.num_processes,
        "batches": batches,
        "weights": [p.detach().clone() for p in program.model.parameters()],
        "progress": view.state_dict(),
        "mapping": view.resume_mapping,
        "warnings": [str(w.message) for w in caught if w.category is InexactResumeWarning],
        "end": {
            "iteration": program.loader.iteration,
            "epoch_index": view.epoch_index,
            "global_step": view.global_step,
        },
    }


def _train_elastic(program: Elastic, stop: tuple[int, int] | None, save_dir: str | None) -> list[dict[str, Any]]:
    accelerator, model, optimizer, loader = program.accelerator, program.model, program.optimizer, program.loader
    view = program.progress.view
    batches: list[dict[str, Any]] = []
    with program.progress.fit(ELASTIC_EPOCHS) as fit:
        for epoch in fit.epochs():
            for ids, x, y in program.progress.train(loader):
                with accelerator.accumulate(model):
                    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                    optimizer.step()
                    optimizer.zero_grad()
                batches.append(
                    {
                        "epoch": epoch,
                        "ids": ids.tolist(),
                        "step": accelerator.step,
                        "end_of_dataloader": accelerator.gradient_state.end_of_dataloader,
                        "tracker_batches": view.train.batches.epoch.started,
                        "iteration": loader.iteration,
                    }
                )
                if stop == (epoch, view.train.batches.epoch.started):
                    accelerator.save_state(save_dir)
                    return batches
    return batches


def main(directory: str, out: str, mode: str, world_one_checkpoint: str | None = None) -> None:
    if mode == "elastic":
        findings = {
            "straight": elastic_run(3),
            "stopped": elastic_run(3, stop=ELASTIC_STOP, save_dir=directory),
            "stopped_after_the_epoch": elastic_run(3, stop=(ELASTIC_STOP[0], 4), save_dir=f"{directory}_end"),
            "from_world_one": elastic_run(3, load_dir=world_one_checkpoint),
        }
        torch.save(findings, out)
        return
    # "stateful": Accelerate's StatefulDataLoader (use_stateful_dataloader) over its seedable sampler (one order on both
    # ranks), saved inside epoch 1 and resumed at its batch
    # "torchdata": that, over a StatefulDataLoader (torchdata's own RandomSampler, hidden by Accelerate's
    # BatchSamplerShard): its order is drawn again, warned at the save and at the resume
    if mode in ("stateful", "torchdata"):
        setup = Setup(samples=20, accumulation=2, epochs=2, stateful=True, seedable=True, torchdata=mode == "torchdata")
        stop = StopAt(4)
    else:  # a plain loader over the seedable sampler: saved after the last batch of epoch 0, between epochs
        setup, stop = Setup(samples=20, accumulation=2, epochs=2, seedable=True), StopAt(3)
    reference = run(setup)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", InexactResumeWarning)
        stopped = run(setup, stop=stop, save_dir=directory)
        resumed = run(setup, load_dir=directory)
    view = tracker_core.get_progress(resumed.accelerator)
    totals = tracker_core.reduce_state(view, "sum")
    findings = {
        "rank": resumed.accelerator.process_index,
        "world": resumed.accelerator.num_processes,
        "ids": stopped.train_ids + resumed.train_ids,
        "ids_exact": stopped.train_ids + resumed.train_ids == reference.train_ids,
        "weights_exact": all(torch.equal(a, b) for a, b in zip(resumed.weights, reference.weights, strict=True)),
        "progress_exact": resumed.state == reference.state,
        "samples": resumed.progress.view.train.samples.lifetime,
        "summed_samples": totals["stages"]["train"]["samples"]["lifetime"],
        "divergence": [str(d) for d in tracker_core.check_divergence(view)],
        "warnings": [str(w.message) for w in caught if w.category is InexactResumeWarning],
    }
    with open(out, "w") as file:
        json.dump(findings, file)


if __name__ == "__main__":
    main(*sys.argv[1:])
    exit_rank()
