"""An AcceleratorProgress's files: its progress file in each ``save_state`` folder (with this process's gradients;
written by the commit of a progress registered for checkpointing), read back and loaded at ``load_state`` before
Accelerate loads anything, and the fit's heartbeat file."""

from __future__ import annotations

import os
import re
import warnings
from typing import Any

import torch

from tracker_core import Tracker
from tracker_core.adapter import GlobalRng, capture_gradients, keep_heartbeat, read_heartbeat, restore_gradients
from tracker_core.adapter import accelerate_checkpoint as checkpoint
from tracker_core.integrations.accelerate import _commit as commit
from tracker_core.integrations.accelerate import _elastic as elastic


class ProgressFiles:
    """Writes and reads this process's progress files; keeps the heartbeat (``heartbeat``: its path, None: no file)."""

    def __init__(self, accelerator: Any, tracker: Tracker, heartbeat: str | None) -> None:
        self._accelerator = accelerator
        self._tracker = tracker
        self._heartbeat = heartbeat
        self.next_save_iteration: int | None = None  # after a load_state
        # a registered progress's save_state under way: its folder and this process's progress, for commit()
        self._pending: tuple[str, checkpoint.SavedProgress] | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without a save under way."""
        return {**self.__dict__, "_pending": None}

    def beat(self) -> None:
        """Keep the fit's heartbeat: the progress now."""
        keep_heartbeat(self._tracker.progress, self._heartbeat)

    def save(
        self,
        models: list[torch.nn.Module],
        output_dir: str,
        iterations: list[checkpoint.LoaderIteration | None],
        evaluation_rng: tuple[str, GlobalRng] | None,
        registered: bool,
    ) -> None:
        """At ``save_state``'s pre-hook: this process's progress, written now, or by :meth:`commit` if ``registered``."""
        accelerator = self._accelerator
        saved = checkpoint.SavedProgress(
            world_size=accelerator.num_processes,
            tracker=self._tracker.state_dict(),
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
        """Commit the registered progress's ``save_state`` under way (``_commit.commit``); warn if a rank's file
        did not come: the commit does not list it, so ``load_state`` refuses the folder."""
        if self._pending is None:
            return
        (directory, saved), self._pending = self._pending, None
        missing = commit.commit(directory, saved)
        if missing:
            warnings.warn(
                f"accelerator.save_state({directory!r}): the progress file of rank(s) {missing} did not come "
                f"within {commit.PATIENCE_S:g} s (save_state called on the main process only, or those processes "
                "failed), so the commit leaves them out and load_state refuses this folder",
                RuntimeWarning,
                stacklevel=5,
            )

    def load(self, models: list[torch.nn.Module], input_dir: str) -> checkpoint.SavedCheckpoint:
        """At ``load_state``'s pre-hook: validate and load, with the saved gradients, so a bad file leaves all unchanged.

        A committed folder (a registered progress saved it) must be what rank 0's progress file lists: every file
        there unchanged (``accelerate_checkpoint.commit_problem``); a save cut short or a folder mixing two saves is
        refused here. Without a commit, this process's file and rank 0's must come from the same save.

        Saved by another number of processes, every saved rank's file is read and the core maps
        the data position by global samples (``tracker_core/distributed/_elastic.py``); this process takes the
        rest (gradients, loader epochs, RNGs) from saved rank ``process_index % saved world size``.
        """
        accelerator = self._accelerator
        found = checkpoint.read_checkpoint(input_dir, accelerator.process_index, accelerator.num_processes)
        entry: dict[str, Any] = found.own.tracker
        if found.ranks is not None:
            elastic.check_supported(accelerator, len(found.ranks))
            entry = {**found.ranks[0].tracker, "ranks": [rank.tracker for rank in found.ranks]}
        parameters = _parameters(models)
        previous = capture_gradients(parameters)
        restore_gradients(parameters, found.own.gradients)
        try:
            self._tracker.load_state_dict(entry)
        except BaseException:
            restore_gradients(parameters, previous)
            raise
        read_heartbeat(self._tracker.progress, self._heartbeat)  # the lost work of the run that saved it
        self.next_save_iteration = _next_save_iteration(accelerator, found.own.save_iteration)
        return found


def _parameters(models: list[torch.nn.Module]) -> list[torch.nn.Parameter]:
    return [p for model in models for p in model.parameters()]


def _next_save_iteration(accelerator: Any, loaded: int) -> int:
    """The number of the next automatically named ``checkpoint_N``: after the loaded one and after
    any newer folder (one left damaged by a crash, when the run resumed from an older one)."""
    newest = loaded
    folder = os.path.join(accelerator.project_dir or "", "checkpoints")
    if accelerator.project_configuration.automatic_checkpoint_naming and os.path.isdir(folder):
        for name in os.listdir(folder):
            match = re.fullmatch(r"checkpoint_(\d+)", name)
            if match:
                newest = max(newest, int(match.group(1)))
    return newest + 1
