"""Each rank's part of the callback's entry and partial gradients: gathered to the writer at a save, picked out at a
load (rank ``rank % W`` of an entry saved at world size ``W``); with ``rank_files=True`` the strategy's checkpoint IO
is wrapped so each part lives in its own file beside the checkpoint (docs/distributed.md, "Rank files")."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from tracker_core import ProgressStateError, Tracker
from tracker_core.adapter import (
    RankFiles,
    RankTensors,
    gather_to_writer,
    remove_other_saves,
    with_rank_files,
    write_rank_files,
    write_rank_tensors,
)
from tracker_core.checkpoints import LIGHTNING_GRADIENTS_KEY, LIGHTNING_STATE_KEY

if TYPE_CHECKING:
    import pytorch_lightning as pl


class RankFilesIO:
    """Delegates to the strategy's own checkpoint IO; splits and joins the progress entry around it."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        # AsyncCheckpointIO writes the checkpoint later, in a thread: the rank files its previous save of a
        # path uses are kept until the next save of that path or teardown (when the writes are done)
        self._deferred = type(inner).__name__ == "AsyncCheckpointIO"
        self._latest: dict[str, str | None] = {}  # path -> the save id of its last save (None: no rank files)

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        entry = checkpoint.get("callbacks", {}).get(LIGHTNING_STATE_KEY) if isinstance(checkpoint, dict) else None
        ranks = entry.get("ranks") if isinstance(entry, dict) else None
        if not isinstance(ranks, list) or len(ranks) < 2:
            self._inner.save_checkpoint(checkpoint, path, storage_options=storage_options)
            self._written(path, None)  # a checkpoint written over no longer uses them
            return
        split = write_rank_files(entry, path)
        save_id = split["ranks"]["save_id"]
        written = {**checkpoint, "callbacks": {**checkpoint["callbacks"], LIGHTNING_STATE_KEY: split}}
        gradients = checkpoint.get(LIGHTNING_GRADIENTS_KEY)
        if isinstance(gradients, dict) and isinstance(gradients.get("ranks"), list) and len(gradients["ranks"]) > 1:
            # each rank's partial gradients in its own file too: a resuming rank loads its own only
            written[LIGHTNING_GRADIENTS_KEY] = {
                "ranks": write_rank_tensors(gradients["ranks"], path, save_id, "gradients")
            }
        self._inner.save_checkpoint(written, path, storage_options=storage_options)
        self._written(path, save_id)

    def _written(self, path: Any, save_id: str | None) -> None:
        """Remove the rank files of ``path``'s older saves (deferred by one save for an asynchronous IO)."""
        key = str(path)
        keep = {save_id, self._latest.get(key)} if self._deferred else {save_id}
        self._latest[key] = save_id
        remove_other_saves(path, {k for k in keep if k is not None})

    def teardown(self) -> None:
        self._inner.teardown()  # an asynchronous IO's writes are done
        latest, self._latest = self._latest, {}
        for path, save_id in latest.items():
            remove_other_saves(path, save_id)

    def load_checkpoint(self, path: Any, *args: Any, **kwargs: Any) -> Any:
        checkpoint = self._inner.load_checkpoint(path, *args, **kwargs)
        if not isinstance(checkpoint, dict):
            return checkpoint
        callbacks = checkpoint.get("callbacks")
        if isinstance(callbacks, dict) and LIGHTNING_STATE_KEY in callbacks:
            callbacks[LIGHTNING_STATE_KEY] = with_rank_files(callbacks[LIGHTNING_STATE_KEY], path)
        gradients = checkpoint.get(LIGHTNING_GRADIENTS_KEY)
        if isinstance(gradients, dict) and isinstance(gradients.get("ranks"), dict):
            checkpoint[LIGHTNING_GRADIENTS_KEY] = {
                "ranks": RankTensors.of(gradients["ranks"], path, key="gradients.ranks")
            }
        return checkpoint

    def remove_checkpoint(self, path: Any) -> None:
        self._inner.remove_checkpoint(path)
        remove_other_saves(path, None)

    def __getattr__(self, name: str) -> Any:
        if name == "_inner":  # unpickling: not set yet
            raise AttributeError(name)
        return getattr(self._inner, name)


def wrap_checkpoint_io(trainer: pl.Trainer) -> None:
    """Wrap the strategy's checkpoint IO once; a strategy that refuses another IO keeps its own."""
    strategy = trainer.strategy
    current = strategy.checkpoint_io  # resolves a wrapping IO's default (AsyncCheckpointIO) first
    if not isinstance(current, RankFilesIO):
        with contextlib.suppress(TypeError):  # XLA accepts only its own IO
            strategy.checkpoint_io = RankFilesIO(current)  # type: ignore[assignment]


def refuse_unread_rank_files(entry: object, rank_files: bool) -> None:
    """An entry whose ranks' entries are in rank files (an index in place of the list) is read through
    ``rank_files=True`` only: without it, refused before anything is loaded."""
    ranks = entry.get("ranks") if isinstance(entry, Mapping) else None
    if not rank_files and isinstance(ranks, Mapping):
        raise ProgressStateError(
            "ranks",
            f"the checkpoint keeps each rank's entry in rank files beside it ({ranks.get('rank_files')!r}): "
            "resume it with ProgressTracker(rank_files=True), as the run that saved it",
        )


def load_progress_only(tracker: Tracker, entry: object, rank: int) -> None:
    """Load rank ``rank``'s progress of ``entry`` (saved rank ``rank % W`` at another world size ``W``)."""
    prefix = ""
    if isinstance(entry, Mapping) and isinstance(entry.get("ranks"), (list, RankFiles)) and entry["ranks"]:
        source = rank % len(entry["ranks"])
        prefix, entry = f"ranks.{source}.", entry["ranks"][source]
    if not isinstance(entry, Mapping) or "progress" not in entry:
        raise ProgressStateError(f"{prefix}progress", "missing: the entry has no progress")
    try:
        tracker.progress.load_state_dict(entry["progress"])
    except ProgressStateError as error:
        key = f"{prefix}progress.{error.key}" if error.key else f"{prefix}progress"
        raise ProgressStateError(key, error.problem) from None


def every_rank(gradients: list[torch.Tensor | None] | None) -> Any:
    """On rank 0, the writer: ``{"ranks": [rank 0's gradients, ...]}`` (DDP's ``no_sync`` leaves each rank its own
    partial sums); elsewhere this rank's own. A collective: every rank calls it, None outside a window."""
    mine = None if gradients is None else [None if g is None else g.cpu() for g in gradients]
    ranks = gather_to_writer(mine)
    return mine if ranks is None else {"ranks": ranks}


def own_gradients(saved: object, rank: int) -> Any:
    """This rank's saved partial gradients (rank ``rank % saved ranks`` at another world size, as its RNGs)."""
    if not isinstance(saved, dict):
        return saved  # saved by one process (or absent)
    ranks = saved.get("ranks")
    if not isinstance(ranks, (list, RankTensors)) or not ranks:  # RankTensors: each rank's in its own file
        raise ProgressStateError("gradients.ranks", "expected a non-empty list of each rank's gradients")
    return ranks[rank % len(ranks)]
