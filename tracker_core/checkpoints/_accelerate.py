"""The progress files written into Accelerate's ``save_state`` folder, one per process, and the folder's commit:
the format is in docs/schema.md ("Accelerate's progress file"), the commit in docs/accelerate.md ("How resume works").
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import zlib
from dataclasses import dataclass
from typing import Any

import torch

import tracker_core.checkpoints._reading as reading
from tracker_core._errors import ProgressStateError
from tracker_core.data._rng import GlobalRng
from tracker_core.state._readers import read_bool, read_int, read_list, read_mapping, read_version
from tracker_core.vocabulary import EVALUATION_STAGES

VERSION = 5
_KEYS = (
    "version",
    "world_size",
    "rank",
    "tracker",
    "gradients",
    "save_iteration",
    "loader_iterations",
    "evaluation_rng",
    "folder",
)
_TEMPORARY = ".progress_tracker_{}.pt.partial"
MIXED = "parts of this folder come from different saves (a save_state killed part-way, or two processes saving into it)"
NOT_COMMITTED = (
    "the save_state that wrote this folder was cut short before a registered AcceleratorProgress wrote it (at the "
    "end of save_state), or no AcceleratorProgress was attached to the Accelerator that saved it"
)


@dataclass(frozen=True)
class LoaderIteration:
    """A prepared train loader: its ``iteration`` now and when its last pass began (None before one), whether that
    pass had yielded its last batch, and whether the loop left it before its end."""

    now: int
    pass_start: int | None
    finished: bool
    left: bool


@dataclass(frozen=True)
class SavedProgress:
    """One process's progress file, read and checked (the tracker entry is checked by the core)."""

    world_size: int
    tracker: dict[str, Any]
    gradients: list[torch.Tensor | None]
    save_iteration: int
    loader_iterations: list[LoaderIteration | None]
    evaluation_rng: tuple[str, GlobalRng] | None  # the global RNGs when the unfinished evaluation began
    rank: int
    folder: dict[str, tuple[int, int]] | None = None  # rank 0's commit: path -> (size, CRC-32); None in the others


def file_name(process_index: int) -> str:
    return f"progress_tracker_{process_index}.pt"


def write(directory: str, process_index: int, saved: SavedProgress) -> None:
    """Write atomically: a kill leaves the previous file or this one, never a mix; an ``OSError``
    (a full disk) names the file and leaves the previous one in place."""
    payload = {
        "version": VERSION,
        "world_size": saved.world_size,
        "rank": process_index,
        "tracker": saved.tracker,
        "gradients": saved.gradients,
        "save_iteration": saved.save_iteration,
        "loader_iterations": [
            None if it is None else {"now": it.now, "pass": it.pass_start, "finished": it.finished, "left": it.left}
            for it in saved.loader_iterations
        ],
        "evaluation_rng": None
        if saved.evaluation_rng is None
        else {"stage": saved.evaluation_rng[0], "rng": saved.evaluation_rng[1].to_plain()},
        "folder": None
        if saved.folder is None
        else {path: {"size": size, "crc32": crc} for path, (size, crc) in saved.folder.items()},
    }
    path = os.path.join(directory, file_name(process_index))
    temporary = os.path.join(directory, _TEMPORARY.format(process_index))
    try:
        with open(temporary, "wb") as stream:
            torch.save(payload, stream)  # no fsync: Accelerate's own files get none either
        os.replace(temporary, path)
    except (OSError, RuntimeError) as error:  # torch.save reports a failed write as a RuntimeError
        with contextlib.suppress(OSError):
            os.remove(temporary)
        code = getattr(error, "errno", None) or errno.EIO
        raise OSError(code, f"could not write {path} ({error}); the previous file there is unchanged") from error


def folder_files(directory: str) -> dict[str, tuple[int, int]]:
    """What the commit lists: every regular file under ``directory`` but rank 0's progress file and the
    temporary ones, by path relative to it (``/``-separated) -> (size, CRC-32 of its bytes)."""
    found = {}
    for path in _files_under(directory):
        full = os.path.join(directory, path)
        with contextlib.suppress(OSError):  # a broken link: not listed
            if stat.S_ISREG(os.stat(full).st_mode):
                found[path] = _file_crc32(full)
    return found


def commit_problem(directory: str, commit: SavedProgress) -> str | None:
    """Why ``directory`` is not the save that rank 0's file ``commit`` committed, or None (also without a commit);
    a file written after the commit must be whole if it is a zip."""
    files = commit.folder
    if files is None:
        return None
    for rank in range(1, commit.world_size):
        if file_name(rank) not in files:
            return (
                f"the commit in {file_name(0)} lists no {file_name(rank)}: that process had not finished this "
                "save_state when rank 0 committed it (save_state called on the main process only, or it failed)"
            )
    for path, (size, crc) in sorted(files.items()):
        full = os.path.join(directory, path)
        try:
            mode = os.stat(full).st_mode
        except OSError:
            return f"{path}, which the save wrote, is missing"
        problem = reading.kind_problem(mode)
        if problem is not None:
            return f"{path}: {problem}"
        found, found_crc = _file_crc32(full)
        if found == 0 < size:
            return f"{path} is an empty file; the save wrote {size} bytes"
        if found != size:
            return f"{path} is {'truncated' if found < size else 'longer'}: {found} bytes, the save wrote {size}"
        if found_crc != crc:
            return f"{path} holds other bytes than the save wrote (its CRC-32 differs)"
    for path in uncommitted(directory, commit):
        problem = reading.zip_problem(os.path.join(directory, path), torch_save=False)
        if problem is not None:
            return f"{path}, written after the commit: {problem}"
    return None


def uncommitted(directory: str, commit: SavedProgress) -> list[str]:
    """The files under ``directory`` that the commit does not list (written after it, or by something else)."""
    listed = commit.folder or {}
    return [path for path in _files_under(directory) if path not in listed]


def _files_under(directory: str) -> list[str]:
    """Every file under ``directory`` (links to folders not followed) but rank 0's progress file and the
    temporary progress files, as sorted ``/``-separated relative paths."""
    found = []
    for folder, _subfolders, names in os.walk(directory):
        relative = os.path.relpath(folder, directory)
        for name in names:
            path = name if relative == "." else f"{relative.replace(os.sep, '/')}/{name}"
            if path != file_name(0) and not (name.startswith(".progress_tracker_") and name.endswith(".pt.partial")):
                found.append(path)
    return sorted(found)


def _file_crc32(path: str) -> tuple[int, int]:
    crc, size = 0, 0
    with open(path, "rb") as stream:
        while chunk := stream.read(reading.CHUNK):
            crc, size = zlib.crc32(chunk, crc), size + len(chunk)
    return size, crc


@dataclass(frozen=True)
class SavedCheckpoint:
    """What one process loads: its own file, or, saved at another world size, every saved rank's."""

    own: SavedProgress  # this process's file; at another world size saved rank ``process_index % len(ranks)``'s
    ranks: list[SavedProgress] | None  # index = saved rank; None when saved at this world size


def read_checkpoint(directory: str, process_index: int, world_size: int) -> SavedCheckpoint:
    """Rank 0's file, whose commit (if any) the folder must match, then this process's file, or every saved rank's
    if saved at another ``world_size``, each from rank 0's save; ``ProgressStateError`` otherwise."""
    first = read(directory, 0)
    problem = commit_problem(directory, first)
    if problem is not None:
        raise ProgressStateError("", f"{directory}: {MIXED}: {problem}; nothing was loaded")
    if first.world_size == world_size:
        found = SavedCheckpoint(first if process_index == 0 else read(directory, process_index), None)
    else:
        ranks = [first, *(read(directory, rank) for rank in range(1, first.world_size))]
        found = SavedCheckpoint(ranks[process_index % first.world_size], ranks)
    for saved in found.ranks or [found.own]:
        problem = other_save(first, saved)
        if problem is not None:
            raise ProgressStateError("", f"{directory}: {MIXED}: {problem}; nothing was loaded")
    return found


def other_save(first: SavedProgress, saved: SavedProgress) -> str | None:
    """Why ``saved`` (a rank's file) does not come from the save that wrote rank 0's ``first``, or None."""
    if (saved.world_size, saved.save_iteration) == (first.world_size, first.save_iteration):
        return None
    return (
        f"{file_name(saved.rank)} was written by save {saved.save_iteration} of {saved.world_size} process(es), "
        f"{file_name(0)} by save {first.save_iteration} of {first.world_size}"
    )


def read(directory: str, process_index: int) -> SavedProgress:
    """Load with ``weights_only=True`` and check the adapter's own keys; ``ProgressStateError`` if bad."""
    path = os.path.join(directory, file_name(process_index))
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} is missing: {NOT_COMMITTED}")
    if not os.path.isfile(path):
        raise ProgressStateError("", f"{path} is not a regular file")
    payload = reading.load(path, lambda problem: ProgressStateError("", problem))
    read_version(payload.get("version") if isinstance(payload, dict) else None, "version", VERSION)
    payload = read_mapping(payload, "", required=_KEYS)
    gradients = payload["gradients"]
    if not isinstance(gradients, list) or not all(g is None or isinstance(g, torch.Tensor) for g in gradients):
        raise ProgressStateError("gradients", "expected a list of tensors and None")
    return SavedProgress(
        world_size=read_int(payload["world_size"], "world_size", minimum=1),
        tracker=payload["tracker"],
        gradients=gradients,
        save_iteration=read_int(payload["save_iteration"], "save_iteration", minimum=0),
        loader_iterations=_loader_iterations(payload["loader_iterations"]),
        evaluation_rng=_evaluation_rng(payload["evaluation_rng"]),
        rank=read_int(payload["rank"], "rank", minimum=0),
        folder=_folder(payload["folder"]),
    )


def _folder(value: object) -> dict[str, tuple[int, int]] | None:
    """The commit's listing: relative paths inside the folder (no ``..``) -> (size, CRC-32)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ProgressStateError("folder", f"expected None or a dict, got {type(value).__name__}")
    found = {}
    for path, record in value.items():
        key = f"folder.{str(path)[:80]}"
        if not isinstance(path, str) or not path or path.startswith("/") or ".." in path.split("/"):
            raise ProgressStateError(key, "expected a path inside the folder")
        fields = read_mapping(record, key, required=("size", "crc32"))
        size = read_int(fields["size"], f"{key}.size", minimum=0)
        found[path] = (size, read_int(fields["crc32"], f"{key}.crc32", minimum=0, maximum=2**32 - 1))
    return found


def _evaluation_rng(value: object) -> tuple[str, GlobalRng] | None:
    if value is None:
        return None
    fields = read_mapping(value, "evaluation_rng", required=("stage", "rng"))
    if fields["stage"] not in EVALUATION_STAGES:
        raise ProgressStateError(
            "evaluation_rng.stage", f"expected one of {[stage.value for stage in EVALUATION_STAGES]}"
        )
    return fields["stage"], GlobalRng.from_plain(fields["rng"], "evaluation_rng.rng")


def _loader_iterations(value: object) -> list[LoaderIteration | None]:
    found: list[LoaderIteration | None] = []
    for index, item in enumerate(read_list(value, "loader_iterations")):
        key = f"loader_iterations.{index}"
        if item is None:
            found.append(None)
            continue
        fields = read_mapping(item, key, required=("now", "pass", "finished", "left"))
        pass_start = None if fields["pass"] is None else read_int(fields["pass"], f"{key}.pass", minimum=0)
        finished = read_bool(fields["finished"], f"{key}.finished")
        left = read_bool(fields["left"], f"{key}.left")
        now = read_int(fields["now"], f"{key}.now", minimum=0)
        found.append(LoaderIteration(now, pass_start, finished, left))
    return found
