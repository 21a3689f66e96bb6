"""A ``DeterministicEngine`` trainer's entry: its progress only (docs/ignite.md, "DeterministicEngine")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ignite.distributed as idist
from torch.utils.data import DataLoader, IterableDataset, RandomSampler

from tracker_core import Progress, ProgressStateError
from tracker_core.adapter import GlobalRng, gather_to_writer, read_mapping

_ENTRY_KEYS = ("progress", "train_loaders", "rng")


def deterministic_entry(progress: Progress) -> dict[str, Any]:
    """The entry to save (collective with several processes: the writer gets every rank's under ``ranks``)."""
    entry = {
        "progress": progress.state_dict(),
        "train_loaders": [{"kind": "untracked"}] * len(progress.view.train.dataloaders),
        "rng": GlobalRng.capture().to_plain(),
    }
    if idist.get_world_size() < 2:
        return entry
    ranks = gather_to_writer(entry)
    return entry if ranks is None else {**entry, "ranks": ranks}


def load_progress(progress: Progress, entry: object) -> None:
    """Load this rank's saved progress from ``entry``, nothing else (``ProgressStateError``: nothing changed)."""
    prefix = ""
    if isinstance(entry, Mapping) and "ranks" in entry:
        ranks = entry["ranks"]
        size, rank = idist.get_world_size(), idist.get_rank()
        if not hasattr(ranks, "__getitem__") or not hasattr(ranks, "__len__") or isinstance(ranks, Mapping):
            raise ProgressStateError("ranks", "expected a list of entries, one per rank")
        if len(ranks) != size:
            raise ProgressStateError(
                "ranks",
                f"saved by {len(ranks)} processes, loading on {size}: a DeterministicEngine positions its data "
                "by its own iteration count, so it resumes at the saved world size only",
            )
        prefix, entry = f"ranks.{rank}", ranks[rank]
    fields = read_mapping(entry, prefix, required=_ENTRY_KEYS, optional=() if prefix else ("ranks",))
    try:
        progress.load_state_dict(fields["progress"])
    except ProgressStateError as error:
        key = ".".join(part for part in (prefix, "progress", error.key) if part)
        raise ProgressStateError(key, error.problem) from None


def inexact_resume(data: object) -> str:
    """Why a DeterministicEngine's own mid-epoch resume of ``data`` differs from the run it continues ("" if not)."""
    if not isinstance(data, DataLoader) or isinstance(getattr(data, "dataset", None), IterableDataset):
        return (
            f"the DeterministicEngine's data ({type(data).__name__}) is not a DataLoader over a map-style dataset: "
            "on resume the engine reads its epoch again from the start after reseeding, which continues at the "
            "same data only if it yields the same batches every time"
        )
    if isinstance(getattr(data, "sampler", None), RandomSampler):  # a subclass may lack what DataLoader sets
        return (
            "the DeterministicEngine restores its saved global RNG states before the DataLoader's RandomSampler "
            "draws the epoch's order (at its first batch): a mid-epoch resume shuffles the rest of that epoch "
            "otherwise than the interrupted run (a plain Engine with the ProgressHandler resumes it exactly)"
        )
    return ""
