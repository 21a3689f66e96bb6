"""The progress file written beside Accelerate's own checkpoint files, one per process.

``progress_tracker_{rank}.pt`` holds plain data plus gradient tensors and loads with
``torch.load(weights_only=True)``::

    {"version": 2,
     "world_size": int,                         # the number of processes that saved (one file each)
     "tracker": <tracker_core.Tracker.state_dict()>,
     "gradients": [Tensor | None, ...],         # partial gradients of an accumulation window
     "save_iteration": int,                     # project_configuration.iteration of this save
     "loader_iterations": [{"now": int, "pass": int | None, "finished": bool} | None, ...],  # per train loader
     "evaluation_rng": {"stage": str, "rng": <global RNG snapshot>} | None}  # at an unfinished evaluation's start
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from typing import Any

import torch

from tracker_core import ProgressStateError
from tracker_core.adapter import GlobalRng, read_int, read_mapping
from tracker_core.vocabulary import EVALUATION_STAGES

VERSION = 2  # 2 added "world_size"; a version 1 file is read as saved at the loading world size
_KEYS = ("version", "world_size", "tracker", "gradients", "save_iteration", "loader_iterations", "evaluation_rng")
_KEYS_V1 = tuple(key for key in _KEYS if key != "world_size")


@dataclass(frozen=True)
class LoaderIteration:
    """A prepared train loader: its ``iteration`` now and when its last pass began (None before one),
    and whether that pass had yielded its last batch."""

    now: int
    pass_start: int | None
    finished: bool


@dataclass(frozen=True)
class SavedProgress:
    """One process's progress file, read and checked (the tracker entry is checked by the core)."""

    world_size: int | None  # None: a version 1 file, which does not say
    tracker: dict[str, Any]
    gradients: list[torch.Tensor | None]
    save_iteration: int
    loader_iterations: list[LoaderIteration | None]
    evaluation_rng: tuple[str, GlobalRng] | None  # the global RNGs when the unfinished evaluation began


def file_name(process_index: int) -> str:
    return f"progress_tracker_{process_index}.pt"


def write(directory: str, process_index: int, saved: SavedProgress) -> None:
    payload = {
        "version": VERSION,
        "world_size": saved.world_size,
        "tracker": saved.tracker,
        "gradients": saved.gradients,
        "save_iteration": saved.save_iteration,
        "loader_iterations": [
            None if it is None else {"now": it.now, "pass": it.pass_start, "finished": it.finished}
            for it in saved.loader_iterations
        ],
        "evaluation_rng": None,
    }
    if saved.evaluation_rng is not None:
        stage, rng = saved.evaluation_rng
        payload["evaluation_rng"] = {"stage": stage, "rng": rng.to_plain()}
    torch.save(payload, os.path.join(directory, file_name(process_index)))


@dataclass(frozen=True)
class SavedCheckpoint:
    """What one process loads: its own file, or, saved at another world size, every saved rank's."""

    own: SavedProgress  # this process's file; at another world size saved rank ``process_index % len(ranks)``'s
    ranks: list[SavedProgress] | None  # index = saved rank; None when saved at this world size


def read_checkpoint(directory: str, process_index: int, world_size: int) -> SavedCheckpoint:
    """This process's file if the checkpoint was saved at ``world_size``, else every saved rank's file
    (the saved world size is read from rank 0's); ``ProgressStateError`` if one is bad or they disagree."""
    own = None
    if os.path.exists(os.path.join(directory, file_name(process_index))):
        own = read(directory, process_index)
        if own.world_size in (None, world_size):
            return SavedCheckpoint(own, None)
    first = own if own is not None and process_index == 0 else read(directory, 0)
    if first.world_size is None:
        raise ProgressStateError(
            "world_size",
            f"{file_name(0)} is a version 1 file, which does not record how many processes saved it "
            f"and {file_name(process_index)} is missing: resume on as many processes as saved it",
        )
    ranks = [
        first,
        *(
            own if own is not None and rank == process_index else read(directory, rank)
            for rank in range(1, first.world_size)
        ),
    ]
    for rank, saved in enumerate(ranks):
        if saved.world_size != first.world_size:
            raise ProgressStateError(
                "world_size",
                f"{file_name(rank)} was saved by {saved.world_size} processes, {file_name(0)} by "
                f"{first.world_size}: the files belong to different checkpoints",
            )
    return SavedCheckpoint(ranks[process_index % first.world_size], ranks)


def read(directory: str, process_index: int) -> SavedProgress:
    """Load with ``weights_only=True`` and check the adapter's own keys; ``ProgressStateError`` if bad."""
    path = os.path.join(directory, file_name(process_index))
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing: this checkpoint was not saved with an AcceleratorProgress")
    try:
        payload = torch.load(path, weights_only=True, map_location="cpu")
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError) as exc:
        raise ProgressStateError("", f"{path} is not a readable progress file ({exc})") from None
    version_1 = isinstance(payload, dict) and payload.get("version") == 1
    payload = dict(read_mapping(payload, "", required=_KEYS_V1 if version_1 else _KEYS))
    if payload["version"] not in (1, VERSION):
        raise ProgressStateError(
            "version", f"unsupported version {payload['version']!r}; this code reads 1 to {VERSION}"
        )
    gradients = payload["gradients"]
    if not isinstance(gradients, list):
        raise ProgressStateError("gradients", f"expected a list, got {type(gradients).__name__}")
    return SavedProgress(
        world_size=None if version_1 else read_int(payload["world_size"], "world_size", minimum=1),
        tracker=payload["tracker"],
        gradients=gradients,
        save_iteration=read_int(payload["save_iteration"], "save_iteration", minimum=0),
        loader_iterations=_loader_iterations(payload["loader_iterations"]),
        evaluation_rng=_evaluation_rng(payload["evaluation_rng"]),
    )


def _evaluation_rng(value: object) -> tuple[str, GlobalRng] | None:
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"stage", "rng"}:
        raise ProgressStateError("evaluation_rng", "expected None or a dict with keys 'stage' and 'rng'")
    if value["stage"] not in EVALUATION_STAGES:
        raise ProgressStateError(
            "evaluation_rng.stage", f"expected one of {[stage.value for stage in EVALUATION_STAGES]}"
        )
    return value["stage"], GlobalRng.from_plain(value["rng"], "evaluation_rng.rng")


def _loader_iterations(value: object) -> list[LoaderIteration | None]:
    if not isinstance(value, list):
        raise ProgressStateError("loader_iterations", f"expected a list, got {type(value).__name__}")
    found: list[LoaderIteration | None] = []
    for index, item in enumerate(value):
        key = f"loader_iterations.{index}"
        if item is None:
            found.append(None)
            continue
        if not isinstance(item, dict) or set(item) != {"now", "pass", "finished"}:
            raise ProgressStateError(key, "expected a dict with keys 'now', 'pass' and 'finished'")
        pass_start = None if item["pass"] is None else read_int(item["pass"], f"{key}.pass", minimum=0)
        if not isinstance(item["finished"], bool):
            raise ProgressStateError(f"{key}.finished", f"expected a bool, got {item['finished']!r}")
        found.append(LoaderIteration(read_int(item["now"], f"{key}.now", minimum=0), pass_start, item["finished"]))
    return found
