"""The commit of a registered progress's ``save_state`` (docs/accelerate.md, "How resume works")."""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import replace

import torch

from tracker_core.adapter import accelerate_checkpoint as checkpoint

PATIENCE_S = 60.0  # how long rank 0 waits for the other processes' progress files of a save
_POLL_S = 0.02


def commit(directory: str, saved: checkpoint.SavedProgress) -> None:
    """Write this process's progress file of ``saved``; rank 0's is the commit, listing the folder's files."""
    if saved.rank != 0:
        checkpoint.write(directory, saved.rank, saved)
        return
    missing = _wait_for_ranks(directory, saved)
    files = checkpoint.folder_files(directory)
    for rank in missing:  # an older save's file: not this one's
        files.pop(checkpoint.file_name(rank), None)
    checkpoint.write(directory, 0, replace(saved, folder=files))
    if missing:
        warnings.warn(
            f"accelerator.save_state({directory!r}): the progress file of rank(s) {missing} did not come "
            f"within {PATIENCE_S:g} s (save_state called on the main process only, or those processes "
            "failed), so the commit leaves them out and load_state refuses this folder",
            RuntimeWarning,
            stacklevel=6,  # the caller of save_state (save_state -> save_custom_state -> state_dict)
        )


def _wait_for_ranks(directory: str, saved: checkpoint.SavedProgress) -> list[int]:
    """The ranks whose progress file of this save is still missing after ``PATIENCE_S`` (read again if changed)."""
    waiting = set(range(1, saved.world_size))
    seen: dict[int, tuple[int, int, int]] = {}
    deadline = time.monotonic() + PATIENCE_S
    while True:
        for rank in sorted(waiting):
            path = os.path.join(directory, checkpoint.file_name(rank))
            try:
                found = os.stat(path)
            except OSError:
                continue
            signature = (found.st_ino, found.st_mtime_ns, found.st_size)
            if seen.get(rank) != signature:
                seen[rank] = signature
                if _of_save(path, saved):
                    waiting.discard(rank)
        if not waiting or time.monotonic() >= deadline:
            return sorted(waiting)
        time.sleep(_POLL_S)


def _of_save(path: str, saved: checkpoint.SavedProgress) -> bool:
    """Whether the progress file at ``path`` (written whole: a rename) was written by the save ``saved``."""
    try:
        payload = torch.load(path, weights_only=True, mmap=True, map_location="cpu")
    except Exception:  # another process's file, replaced or removed while read: looked at again if it changes
        return False
    expected = {"version": checkpoint.VERSION, "world_size": saved.world_size, "save_iteration": saved.save_iteration}
    return isinstance(payload, dict) and all(payload.get(key) == value for key, value in expected.items())
