"""An AcceleratorProgress's files: its progress file in each ``save_state`` folder, whose commit is rank 0's
(docs/accelerate.md, "How resume works"), and the fit's heartbeat."""

from __future__ import annotations

import os
import re
import time
import warnings
from dataclasses import replace
from typing import Any

import torch

from tracker_core import ProgressStateError, Tracker
from tracker_core.adapter import GlobalRng, capture_gradients, keep_heartbeat, read_heartbeat, restore_gradients
from tracker_core.adapter import accelerate_checkpoint as checkpoint

PATIENCE_S = 60.0  # how long rank 0 waits for the other processes' progress files of a save
_POLL_S = 0.02


class ProgressFiles:
    """Writes and reads this process's progress files; keeps the heartbeat (``heartbeat``: its path, None: no file)."""

    def __init__(self, tracker: Tracker, heartbeat: str | None) -> None:
        self._tracker = tracker
        self._heartbeat = heartbeat
        self.next_save_iteration: int | None = None  # after a load_state
        self._pending: tuple[str, checkpoint.SavedProgress] | None = None  # a registered save under way, for commit()

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without a save under way."""
        return {**self.__dict__, "_pending": None}

    def beat(self) -> None:
        """Keep the fit's heartbeat: the progress now."""
        keep_heartbeat(self._tracker.progress, self._heartbeat)

    def save(
        self,
        accelerator: Any,
        models: list[torch.nn.Module],
        output_dir: str,
        tracker: dict[str, Any],
        iterations: list[checkpoint.LoaderIteration | None],
        evaluation_rng: tuple[str, GlobalRng] | None,
        registered: bool,
    ) -> None:
        """At ``save_state``'s pre-hook: this process's progress (``tracker``: its entry), now or at :meth:`commit`."""
        saved = checkpoint.SavedProgress(
            world_size=accelerator.num_processes,
            tracker=tracker,
            gradients=capture_gradients(_parameters(models)),
            save_iteration=accelerator.project_configuration.iteration,
            loader_iterations=iterations,
            evaluation_rng=evaluation_rng,
            rank=accelerator.process_index,
        )
        if registered:
            self._pending = (output_dir, saved)  # written by commit(), once Accelerate's files are
        else:
            self._pending = None
            checkpoint.write(output_dir, saved.rank, saved)
        self.beat()

    def commit(self) -> None:
        """Commit the registered progress's ``save_state`` under way."""
        if self._pending is not None:
            (directory, saved), self._pending = self._pending, None
            _commit(directory, saved)

    def load(self, accelerator: Any, models: list[torch.nn.Module], input_dir: str) -> checkpoint.SavedCheckpoint:
        """At ``load_state``'s pre-hook: check the folder and load its progress and gradients, or change nothing."""
        found = checkpoint.read_checkpoint(input_dir, accelerator.process_index, accelerator.num_processes)
        entry: dict[str, Any] = found.own.tracker
        if found.ranks is not None:
            _check_elastic(accelerator, len(found.ranks))
            entry = {**found.ranks[0].tracker, "ranks": [rank.tracker for rank in found.ranks]}
        restore_gradients(_parameters(models), found.own.gradients, then=lambda: self._tracker.load_state_dict(entry))
        read_heartbeat(self._tracker.progress, self._heartbeat)  # the lost work of the run that saved it
        self.next_save_iteration = _next_save_iteration(accelerator, found.own.save_iteration)
        return found


def _check_elastic(accelerator: Any, saved_world_size: int) -> None:
    """Refuse an elastic load unless every train loader is sharded the way the core maps (whole batches, one order)."""
    needs = []
    if not accelerator.use_seedable_sampler:
        needs.append("DataLoaderConfiguration(use_seedable_sampler=True) (one order per epoch at any world size)")
    if accelerator.split_batches:
        needs.append("split_batches=False")
    if accelerator.dispatch_batches:
        needs.append("dispatch_batches off (no DataLoaderDispatcher)")
    if accelerator.use_stateful_dataloader:
        needs.append("use_stateful_dataloader=False")
    if needs:
        raise ProgressStateError(
            "world_size",
            f"saved by {saved_world_size} processes, loading on {accelerator.num_processes}: an elastic resume "
            f"through Accelerate needs {'; '.join(needs)}. Nothing was loaded",
        )


def _parameters(models: list[torch.nn.Module]) -> list[torch.nn.Parameter]:
    return [p for model in models for p in model.parameters()]


def _next_save_iteration(accelerator: Any, loaded: int) -> int:
    """The next automatic ``checkpoint_N``: after the loaded one and any newer (damaged) folder."""
    folder = os.path.join(accelerator.project_dir or "", "checkpoints")
    automatic = accelerator.project_configuration.automatic_checkpoint_naming
    names = os.listdir(folder) if automatic and os.path.isdir(folder) else []
    numbers = [int(match.group(1)) for name in names if (match := re.fullmatch(r"checkpoint_(\d+)", name))]
    return max([loaded, *numbers]) + 1


def _commit(directory: str, saved: checkpoint.SavedProgress) -> None:
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
