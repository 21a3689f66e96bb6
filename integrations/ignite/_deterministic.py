"""Ignite's ``DeterministicEngine``: the engine positions its data and reseeds the global RNG itself on resume.

The handler counts its events as on any engine, and its checkpoint entry carries the progress only for
what to load: the entry has the form of every other (``progress``, ``train_loaders``, ``rng``; several
processes: every rank's under ``ranks``), its train loaders ``untracked`` and its RNGs for reading.
Loading it sets the progress and nothing else: no train loader is positioned and no global RNG is
restored, so the engine's own resume (``ReproducibleBatchSampler``, ``manual_seed(seed + epoch)``, its
saved ``rng_states``) is the only one. It resumes at the saved world size only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ignite.distributed as idist

from tracker_core import Progress, ProgressStateError
from tracker_core.adapter import GlobalRng, gather_to_writer, read_mapping

_ENTRY_KEYS = ("progress", "train_loaders", "rng")


def deterministic_entry(progress: Progress) -> dict[str, Any]:
    """The entry to save (collective with several processes: the writer gets every rank's under ``ranks``)."""
    loaders = len(progress.view.train.dataloaders)
    entry = {
        "progress": progress.state_dict(),
        "train_loaders": [{"kind": "untracked"}] * loaders,
        "rng": GlobalRng.capture().to_plain(),
    }
    if idist.get_world_size() < 2:
        return entry
    ranks = gather_to_writer(entry)
    return entry if ranks is None else {**entry, "ranks": ranks}


def load_progress(progress: Progress, entry: object) -> None:
    """Load this rank's saved progress from ``entry`` (the state of a ``ProgressHandler``), nothing else.

    Raises ``ProgressStateError`` naming the key (under ``progress_tracker``'s entry), changing nothing.
    """
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
        prefix = f"ranks.{rank}"
        entry = ranks[rank]
    fields = read_mapping(entry, prefix, required=_ENTRY_KEYS, optional=() if prefix else ("ranks",))
    try:
        progress.load_state_dict(fields["progress"])
    except ProgressStateError as error:
        key = ".".join(part for part in (prefix, "progress", error.key) if part)
        raise ProgressStateError(key, error.problem) from None
