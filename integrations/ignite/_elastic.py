"""Ignite's side of an elastic resume (docs/ignite.md, "Resuming at another world size")."""

from __future__ import annotations

from typing import Any

import ignite.distributed as idist
from ignite.engine import Engine
from torch.utils.data import DataLoader

from tracker_core import ProgressStateError, ProgressView
from tracker_core.adapter import batches_in, saved_elsewhere


def check_loader_given(entry: object, dataloader: DataLoader[Any] | None) -> None:
    """Raise if ``entry`` was saved at another world size and the trainer's DataLoader is unknown."""
    if saved_elsewhere(entry) and dataloader is None:
        ranks = entry["ranks"]  # type: ignore[index]
        size = idist.get_world_size()
        raise ProgressStateError(
            "ranks",
            f"saved at world size {len(ranks)}, loading at {size}: an elastic resume maps the data position "
            "onto the trainer's DataLoader; pass it before loading: attach(trainer, ..., dataloader=loader)",
        )


def check_run_loader(engine: Engine, dataloader: DataLoader[Any] | None) -> None:
    """Raise if ``run()`` got another loader than the one the checkpoint was loaded onto."""
    if dataloader is not None and engine.state.dataloader is not dataloader:
        raise ValueError(
            "the checkpoint was loaded onto the DataLoader given to attach(trainer, dataloader=...), "
            "but the trainer's run() got another data object: pass the same DataLoader to run()"
        )


def map_engine(engine: Engine, view: ProgressView) -> None:
    """Set Ignite's ``epoch_length`` to this run's loader and ``iteration`` to the re-based batch count; raise
    ``ValueError`` if Ignite would then stop before ``max_epochs`` (earlier epochs counted more batches)."""
    state = engine.state
    length = batches_in(state.dataloader)
    if length is None:
        raise ValueError("an elastic resume needs a train DataLoader with a length (Ignite's epoch_length)")
    iteration = view.train.batches.run.completed
    max_epochs = state.max_epochs
    if max_epochs is not None and _last_check(view, iteration, length, max_epochs) >= length * max_epochs:
        raise ValueError(
            f"elastic resume: Ignite would stop before epoch {state.max_epochs}: this rank's {iteration} "
            f"iterations (counted partly at the saved world size) reach epoch_length {length} x max_epochs "
            f"{state.max_epochs} too early; resume with a per-rank batch size giving at least as many "
            "batches per epoch as when saved"
        )
    state.epoch_length = length
    state.iteration = iteration


def _last_check(view: ProgressView, iteration: int, length: int, max_epochs: int) -> int:
    """``iteration`` when Ignite last checks ``iteration < epoch_length * max_epochs`` before its final epoch
    (now, if none is left): the re-entered epoch adds ``length - consumed`` batches, each later one ``length``."""
    later = max_epochs - 1 - view.train.epochs.run.completed  # epochs (the re-entered one too) before the last check
    return iteration + later * length - epoch_consumed(view) if later > 0 else iteration


def epoch_consumed(view: ProgressView) -> int:
    """The train batches of the loaded epoch that completed (0 between epochs)."""
    return view.train.batches.epoch.completed if view.train.epochs.run.in_flight else 0
