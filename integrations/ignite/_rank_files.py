"""Each rank's progress entry in its own file beside an Ignite checkpoint (docs/distributed.md, "Rank files")."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import ignite.distributed as idist
from ignite.handlers import DiskSaver

from tracker_core.adapter import remove_other_saves, write_rank_files
from tracker_core.checkpoints import IGNITE_STATE_KEYS


class RankFilesSaver(DiskSaver):
    """A ``DiskSaver`` (same arguments) that writes each rank's progress entry to its own file beside the checkpoint,
    ``<file>.ranks/<save_id>/rank-<r>.json``, removed with it; the checkpoint keeps rank 0's entry and an index.
    Keep the ``.ranks`` folder with the checkpoint (docs/ignite.md, docs/distributed.md "Rank files")."""

    def __call__(self, checkpoint: Mapping[str, Any], filename: str, metadata: Mapping[str, Any] | None = None) -> None:
        path = os.path.join(self.dirname, filename)
        writes = idist.get_rank() == self.save_on_rank
        split, save_ids = _split(checkpoint, path) if writes else (checkpoint, [])
        super().__call__(split, filename, metadata)
        if writes:
            remove_other_saves(path, save_ids)  # a checkpoint written over no longer uses the older ones

    def remove(self, filename: str) -> None:
        super().remove(filename)
        if idist.get_rank() == self.save_on_rank:
            remove_other_saves(os.path.join(self.dirname, filename), None)


def _split(checkpoint: Mapping[str, Any], path: str) -> tuple[Mapping[str, Any], list[str]]:
    """``checkpoint`` with each ProgressHandler state's gathered entry split into rank files, and their save ids."""
    if _is_state(checkpoint):  # Checkpoint saved the handler alone: its state is the whole file
        return _split_state(checkpoint, path)
    split, save_ids = dict(checkpoint), []
    for key, value in checkpoint.items():
        if _is_state(value):
            split[key], saved = _split_state(value, path)
            save_ids += saved
    return split, save_ids


def _split_state(state: Mapping[str, Any], path: str) -> tuple[dict[str, Any], list[str]]:
    entry = state["progress_tracker"]
    ranks = entry.get("ranks") if isinstance(entry, dict) else None
    if not isinstance(ranks, list) or len(ranks) < 2:
        return dict(state), []
    index = write_rank_files(entry, path)
    return {**state, "progress_tracker": index}, [index["ranks"]["save_id"]]


def _is_state(value: object) -> bool:
    return isinstance(value, Mapping) and set(value) == set(IGNITE_STATE_KEYS)
