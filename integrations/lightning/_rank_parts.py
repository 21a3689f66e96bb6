"""Each rank's part of the callback's checkpoint entry and partial gradients: gathered to the writer at a save,
picked out at a load (rank ``rank % W`` of an entry saved at another world size ``W``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from tracker_core import ProgressStateError, Tracker
from tracker_core.adapter import RankFiles, RankTensors, gather_to_writer


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
    """On rank 0, the writer: ``{"ranks": [rank 0's gradients, ...]}``; elsewhere this rank's own (collective).

    DDP's ``no_sync`` leaves each rank its own partial sums. Every rank calls it at a fit
    checkpoint, with None outside an accumulation window: one 8-byte ``all_reduce`` then, and
    a ``gather`` to the writer only when some rank is inside one (``gather_to_writer``).
    """
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
