"""Reading the progress entry back from a checkpoint without its framework (no pickled code runs), and the keys
of each framework's layout that the adapters import. docs/cli.md gives the formats, the checks made before loading
and the errors."""

from __future__ import annotations

import os
import re
import stat
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, overload

import tracker_core.checkpoints._accelerate as accelerate_file
import tracker_core.checkpoints._reading as reading
import tracker_core.checkpoints._urls as urls
from tracker_core._errors import ProgressStateError
from tracker_core._tracker import Tracker
from tracker_core.distributed._rank_files import RankFiles

__all__ = [
    "IGNITE_STATE_KEYS",
    "LIGHTNING_GRADIENTS_KEY",
    "LIGHTNING_STATE_KEY",
    "PLAIN_STATE_KEY",
    "CheckpointFileError",
    "ProgressCheckpoint",
    "newest_intact_checkpoint",
    "read_checkpoint",
]

LIGHTNING_STATE_KEY = "ProgressTracker"
LIGHTNING_GRADIENTS_KEY = "progress_tracker_gradients"
IGNITE_STATE_KEYS = ("progress_tracker", "gradients")
PLAIN_STATE_KEY = "progress_tracker"

_ACCELERATE_PROGRESS_FILE = re.compile(r"progress_tracker_(\d+)\.pt")
_SHARDED_META = "meta.pt"  # Lightning's _METADATA_FILENAME beside torch.distributed.checkpoint shards
_DCP_METADATA = ".metadata"  # what torch.distributed.checkpoint writes after the shards
_DEEPSPEED_MARKS = frozenset({"latest", "zero_to_fp32.py"})  # what DeepSpeed's save_checkpoint writes
_CHECKPOINT_SUFFIXES = (".ckpt", ".pt", ".pth")  # files a directory scan considers
_NO_COMMIT = (
    "Accelerate's files (the folder has no commit: the AcceleratorProgress that saved it was not registered for "
    "checkpointing, accelerator.register_for_checkpointing(progress), so only its progress files are checked)"
)
_AFTER_COMMIT = (
    "(not in the folder when the save committed: written after it, by an object registered for checkpointing after "
    "the progress or by something else)"
)
_LOOKED_FOR = (
    f"looked for checkpoint['callbacks'][{LIGHTNING_STATE_KEY!r}] (Lightning ProgressTracker) and for a value "
    f"with keys {', '.join(map(repr, IGNITE_STATE_KEYS))} (Ignite ProgressHandler) and for "
    f"checkpoint[{PLAIN_STATE_KEY!r}] (a plain loop's Tracker.state_dict())"
)


class CheckpointFileError(ValueError):
    """A checkpoint cannot be used (missing, truncated, without a progress entry, or with a damaged one); the
    message names the file or folder and what is wrong."""


@dataclass(frozen=True)
class ProgressCheckpoint:
    """The validated progress entries (``Tracker.state_dict()``) of one checkpoint, one per process (index = rank);
    ``format``: ``"lightning"``, ``"ignite"``, ``"plain"`` (a plain loop's) or ``"accelerate"``; ``location``: where
    in the checkpoint the entry was found; ``unchecked``: the parts that could not be checked here, and why."""

    path: Path | str  # the URL (a str) of a checkpoint read from an fsspec URL other than file://
    format: str
    location: str
    entries: tuple[dict[str, Any], ...]
    unchecked: tuple[str, ...] = ()
    rank_files: str | None = None  # the folder of the ranks' entry files (rank-<r>.json), when they are in files


def read_checkpoint(path: str | os.PathLike[str]) -> ProgressCheckpoint:
    """Find the progress entry of a checkpoint file or folder (or its fsspec URL) and validate it; a
    :class:`CheckpointFileError` names the path and the problem (docs/cli.md lists them)."""
    found = _local_or_url(path)
    return _read_url(found) if isinstance(found, str) else _read_local(found, None)


def _read_local(path: Path, origin: str | None) -> ProgressCheckpoint:
    """``read_checkpoint`` of a local path; ``origin``: the URL it was fetched from (its rank files are there)."""
    mode = _mode(path)
    if mode is not None and stat.S_ISDIR(mode):
        return _read_folder(path)
    fmt, location, entry = _find_entry(path, _load(path))
    if not isinstance(entry, dict) or not isinstance(entry.get("ranks"), dict):  # no index of rank files
        return ProgressCheckpoint(path, fmt, location, _rank_entries(path, location, entry))
    try:
        files = RankFiles.of(entry["ranks"], path if origin is None else origin)
    except ProgressStateError as error:
        raise CheckpointFileError(f"{path}: damaged progress entry at {location}: {error}") from None
    entries = _rank_entries(path, location, {**entry, "ranks": files})
    where = files.where(0).replace("rank-0.json", "rank-<r>.json")
    return ProgressCheckpoint(path, fmt, f"{location} (each rank's entry in {where})", entries, rank_files=files.folder)


@overload
def newest_intact_checkpoint(paths: os.PathLike[str] | Iterable[os.PathLike[str]]) -> Path: ...


@overload
def newest_intact_checkpoint(paths: str | Iterable[str | os.PathLike[str]]) -> Path | str: ...


def newest_intact_checkpoint(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> Path | str:
    """The newest checkpoint (by modification time) whose progress entry reads and validates: the one to resume
    from. ``paths``: checkpoint files and folders, or one directory (or fsspec URL) to search recursively. Each
    newer damaged candidate is skipped with a ``UserWarning`` naming it and why; :class:`CheckpointFileError` if
    none is intact. A URL's checkpoint comes back as its URL (a ``str``); docs/cli.md gives the search."""
    candidates = sorted(_candidates(paths), key=lambda p: (_modified(p), _natural(str(p))), reverse=True)
    skipped: list[str] = []
    for candidate in candidates:
        try:
            read_checkpoint(candidate)
        except CheckpointFileError as error:
            skipped.append(str(error))
            continue
        for reason in skipped:
            warnings.warn(f"skipped a checkpoint newer than {candidate}: {reason}", UserWarning, stacklevel=2)
        return candidate
    if not candidates:
        where = paths if isinstance(paths, (str, os.PathLike)) else "an empty list of paths"
        raise CheckpointFileError(f"no checkpoint found in {where}")
    raise CheckpointFileError("no intact checkpoint: " + "; ".join(skipped))


# files ------------------------------------------------------------------------------------
def _mode(path: Path) -> int | None:
    """``st_mode`` of ``path`` (links followed), None if there is nothing there."""
    try:
        return os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as error:
        raise CheckpointFileError(f"{path}: cannot be read ({error.strerror or error})") from None


def _check_file(path: Path) -> None:
    """A regular, non-empty file whose zip members all match their CRC-32; ``CheckpointFileError`` naming it."""
    mode = _mode(path)
    if mode is None:
        raise CheckpointFileError(f"{path}: no such file or folder")
    problem = reading.kind_problem(mode)
    if problem is None:
        problem = "empty file" if os.path.getsize(path) == 0 else reading.zip_problem(path, torch_save=True)
    if problem is not None:
        raise CheckpointFileError(f"{path}: {problem}")


def _load(path: Path) -> Any:
    _check_file(path)
    return reading.load(path, CheckpointFileError, mmap=True)


def _find_entry(path: Path, payload: Any) -> tuple[str, str, Any]:
    """(format, location, entry) of the progress entry in a loaded checkpoint file."""
    if isinstance(payload, dict) and isinstance(payload.get("callbacks"), dict):
        if LIGHTNING_STATE_KEY not in payload["callbacks"]:
            raise CheckpointFileError(
                f"{path}: a Lightning checkpoint without a progress entry: checkpoint['callbacks'] has no "
                f"{LIGHTNING_STATE_KEY!r} (was the ProgressTracker callback in the Trainer?)"
            )
        entry = payload["callbacks"][LIGHTNING_STATE_KEY]
        return "lightning", f"checkpoint['callbacks'][{LIGHTNING_STATE_KEY!r}]", entry
    if _is_handler_state(payload):
        return "ignite", "checkpoint['progress_tracker']", payload["progress_tracker"]
    if isinstance(payload, dict):
        keys = [key for key, value in payload.items() if _is_handler_state(value)]
        if len(keys) > 1:
            raise CheckpointFileError(f"{path}: several ProgressHandler states, under keys {keys!r}")
        if keys:
            return "ignite", f"checkpoint[{keys[0]!r}]['progress_tracker']", payload[keys[0]]["progress_tracker"]
        if PLAIN_STATE_KEY in payload:
            return "plain", f"checkpoint[{PLAIN_STATE_KEY!r}]", payload[PLAIN_STATE_KEY]
    raise CheckpointFileError(f"{path}: no progress entry: {_LOOKED_FOR}")


def _rank_entries(path: Path, location: str, entry: Any) -> tuple[dict[str, Any], ...]:
    """Each rank's validated entry: a ``Tracker.gathered_state_dict()`` (several processes) holds
    every rank's under ``"ranks"``, another entry is the only rank's."""
    ranks = entry.get("ranks") if isinstance(entry, dict) else None
    if not isinstance(ranks, (list, RankFiles)) or not ranks:
        _validate(path, location, entry)
        return (entry,)
    entries = []
    for rank in range(len(ranks)):
        try:
            entries.append(ranks[rank])
        except ProgressStateError as error:  # a rank file missing or damaged
            raise CheckpointFileError(f"{path}: damaged progress entry at {location}: {error}") from None
        _validate(path, f"{location}['ranks'][{rank}]", entries[rank])
    if {key: value for key, value in entry.items() if key != "ranks"} != entries[0]:
        raise CheckpointFileError(
            f"{path}: damaged progress entry at {location}: its top level is not a copy of ['ranks'][0], "
            "as Tracker.gathered_state_dict() writes it"
        )
    return tuple(entries)


def _is_handler_state(value: object) -> bool:
    return isinstance(value, dict) and set(value) == set(IGNITE_STATE_KEYS)


def _validate(path: Path, location: str, entry: object) -> None:
    """The core's full check of ``entry``; nothing is loaded, no global state touched."""
    try:
        Tracker().validate_state_dict(entry)
    except ProgressStateError as error:
        raise CheckpointFileError(f"{path}: damaged progress entry at {location}: {error}") from None


# folders ------------------------------------------------------------------------------------
def _folder_kind(names: Iterable[str]) -> str | None:
    """The checkpoint folder ``names`` make (``"accelerate"``, Lightning's ``"sharded"``, torch's ``"dcp"`` alone or
    ``"deepspeed"``: the marks above), or None."""
    names = set(names)
    if any(_ACCELERATE_PROGRESS_FILE.fullmatch(name) for name in names):
        return "accelerate"
    if _SHARDED_META in names:
        return "sharded"
    if _DCP_METADATA in names:
        return "dcp"
    if names & _DEEPSPEED_MARKS:
        return "deepspeed"
    return None


def _read_folder(folder: Path) -> ProgressCheckpoint:
    try:
        names = sorted(os.listdir(folder))
    except OSError as error:
        raise CheckpointFileError(f"{folder}: cannot be listed ({error.strerror or error})") from None
    kind = _folder_kind(names)
    if kind == "sharded":
        return _read_sharded(folder, names)
    if kind == "dcp":
        raise CheckpointFileError(
            f"{folder}: a torch.distributed.checkpoint folder (.metadata and *.distcp shards) without Lightning's "
            f"{_SHARDED_META}: not read (its .metadata is a pickle, which is never unpickled here); Lightning's "
            f"sharded checkpoints (strategy='fsdp') keep the progress entry in {_SHARDED_META} beside the shards"
        )
    if kind == "deepspeed":
        raise CheckpointFileError(
            f"{folder}: a DeepSpeed checkpoint folder (Lightning's strategy='deepspeed'): not read (its progress "
            "entry lies among DeepSpeed's pickled objects in <tag>/mp_rank_00_model_states.pt); convert it with "
            "pytorch_lightning.utilities.deepspeed.convert_zero_checkpoint_to_fp32_state_dict and inspect that file"
        )
    return _read_accelerate(folder, names)


def _read_sharded(folder: Path, names: list[str]) -> ProgressCheckpoint:
    """Lightning's sharded checkpoint: the entry is in ``meta.pt``; the shards themselves are not read."""
    if _DCP_METADATA not in names:
        raise CheckpointFileError(
            f"{folder}: a Lightning sharded checkpoint folder ({_SHARDED_META} plus torch.distributed.checkpoint "
            f"shards), but its {_DCP_METADATA}, which torch.distributed.checkpoint writes after every shard, is "
            "missing: the save of the shards was cut short"
        )
    for name in names:
        if name.endswith(".distcp") and _mode(folder / name) is not None and os.path.getsize(folder / name) == 0:
            raise CheckpointFileError(f"{folder / name}: empty shard")
    meta = folder / _SHARDED_META
    fmt, location, entry = _find_entry(meta, _load(meta))
    location = _SHARDED_META + location.removeprefix("checkpoint")
    return ProgressCheckpoint(folder, fmt, location, _rank_entries(meta, location, entry))


# Accelerate folders --------------------------------------------------------------------------
def _read_accelerate(folder: Path, names: list[str]) -> ProgressCheckpoint:
    ranks = sorted(int(match[1]) for name in names if (match := _ACCELERATE_PROGRESS_FILE.fullmatch(name)))
    if not ranks:
        raise CheckpointFileError(
            f"{folder}: no progress entry: looked for progress_tracker_<rank>.pt, which AcceleratorProgress writes "
            "in accelerator.save_state (at its end when registered for checkpointing: none if the save was cut "
            f"short), and for {_SHARDED_META} (a Lightning sharded checkpoint)"
        )
    if ranks[0] != 0:
        raise CheckpointFileError(
            f"{folder}: {accelerate_file.file_name(0)} is missing: {accelerate_file.NOT_COMMITTED}"
        )
    first = _read_progress_file(folder, 0)
    world_size = first.world_size
    expected = list(range(world_size))
    if ranks != expected:
        missing = [rank for rank in expected if rank not in ranks]
        extra = [rank for rank in ranks if rank >= world_size]
        problems = [f"the progress file of rank(s) {missing} is missing"] if missing else []
        problems += [f"progress files of rank(s) {extra} belong to no rank of that save"] if extra else []
        raise CheckpointFileError(f"{folder}: saved by {world_size} process(es), but " + " and ".join(problems))
    problem = accelerate_file.commit_problem(str(folder), first)
    if problem is not None:
        raise CheckpointFileError(f"{folder}: {accelerate_file.MIXED}: {problem}")
    entries = []
    for rank in expected:
        file = folder / accelerate_file.file_name(rank)
        saved = first if rank == 0 else _read_progress_file(folder, rank)
        if saved.rank != rank:
            raise CheckpointFileError(f"{file}: written by rank {saved.rank}, not rank {rank} (a copied file?)")
        problem = accelerate_file.other_save(first, saved)
        if problem is not None:
            raise CheckpointFileError(f"{folder}: {accelerate_file.MIXED}: {problem}")
        _validate(file, "['tracker']", saved.tracker)
        entries.append(saved.tracker)
    unchecked: tuple[str, ...] = (_NO_COMMIT,)
    if first.folder is not None:
        unchecked = tuple(f"{path} {_AFTER_COMMIT}" for path in accelerate_file.uncommitted(str(folder), first))
    return ProgressCheckpoint(folder, "accelerate", "progress_tracker_<rank>.pt['tracker']", tuple(entries), unchecked)


def _read_progress_file(folder: Path, rank: int) -> accelerate_file.SavedProgress:
    file = folder / accelerate_file.file_name(rank)
    _check_file(file)
    try:
        return accelerate_file.read(str(folder), rank)
    except ProgressStateError as error:
        raise CheckpointFileError(f"{file}: damaged progress file: {error}") from None


# candidates --------------------------------------------------------------------------------
def _candidates(paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]]) -> list[Path | str]:
    if isinstance(paths, (str, os.PathLike)):
        path = _local_or_url(paths)
        if isinstance(path, str):
            try:
                return list(urls.candidates(path, _folder_kind, _CHECKPOINT_SUFFIXES))
            except urls.UrlProblem as error:
                raise CheckpointFileError(str(error)) from None
        if not path.is_dir() or _is_checkpoint_folder(path):
            return [path]
        found = urls.scan(os.walk(path), _is_checkpoint_folder, _CHECKPOINT_SUFFIXES, os.path.join)
        return [Path(file) for file in found]  # symbolic links to folders are not followed
    return [_local_or_url(p) for p in paths]


def _local_or_url(path: str | os.PathLike[str]) -> Path | str:
    """A local ``Path`` (``file://`` URLs included), or the URL of another fsspec protocol."""
    if not urls.is_url(path):
        return Path(path)
    try:
        local = urls.local_path(path)
    except urls.UrlProblem as error:
        raise CheckpointFileError(str(error)) from None
    return path if local is None else local


def _read_url(url: str) -> ProgressCheckpoint:
    try:
        with urls.fetched(url, CheckpointFileError) as local:
            return replace(_read_local(local, url), path=url)
    except urls.UrlProblem as error:
        raise CheckpointFileError(str(error)) from None


def _is_checkpoint_folder(path: str | Path) -> bool:
    try:
        return _folder_kind(os.listdir(path)) is not None
    except OSError:
        return False


def _modified(path: Path | str) -> int:
    if isinstance(path, str):
        return urls.modified(path)
    try:
        if path.is_dir():
            return max((p.stat().st_mtime_ns for p in path.iterdir() if p.is_file()), default=path.stat().st_mtime_ns)
        return path.stat().st_mtime_ns
    except OSError:
        return 0


def _natural(name: str) -> list[tuple[int, str]]:
    """Sort key: numbers in ``name`` compare as numbers (checkpoint_10 after checkpoint_9)."""
    return [(int(part), "") if part.isdigit() else (-1, part) for part in re.split(r"(\d+)", name)]
