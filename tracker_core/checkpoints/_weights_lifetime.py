"""The lifetime a model's weights carry (``tracker_core.track_lifetime``), read from a weights-only file.

``progress-tracker inspect`` falls back to it when a path holds no trainer checkpoint: a
``torch.save(model.state_dict())`` file, a Lightning ``save_weights_only=True`` checkpoint (the
weights under ``"state_dict"``), a safetensors file, or the folder Accelerate's ``save_model``
writes (``model.safetensors``, ``pytorch_model.bin`` or their shards). Only the lifetime buffers
are read from a safetensors file; torch files are checked and loaded as ``read_checkpoint`` does
(``weights_only=True``, memory-mapped). A model's weights hold its progress counts only: no data
positions, generators or gradients.
"""

from __future__ import annotations

import json
import os
import re
import stat
import struct
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import tracker_core.checkpoints._urls as urls
from tracker_core._errors import ProgressStateError
from tracker_core.checkpoints import (
    CheckpointFileError,
    ProgressCheckpoint,
    _load,
    _mode,
)
from tracker_core.state._model_lifetime import lifetimes_in

FORMAT = "weights"
_WEIGHT_FILE = re.compile(r"(model|pytorch_model)(-\d+-of-\d+)?\.(safetensors|bin)")  # Accelerate's save_model


def read_weights_lifetime(path: str | os.PathLike[str]) -> ProgressCheckpoint | None:
    """The furthest lifetime in the weights at ``path`` (a file, an Accelerate ``save_model`` folder or
    their URL) as a checkpoint of format ``"weights"`` with one entry, ``{"progress": state}``; None
    if ``path`` holds no lifetime (or no weights). ``CheckpointFileError`` naming the file and the
    buffer if a lifetime is damaged, or a safetensors file is cut short."""
    if urls.is_url(path):
        return _read_url(str(path))
    path = Path(path)
    mode = _mode(path)
    if mode is None:
        return None
    files = _weight_files(path) if stat.S_ISDIR(mode) else [path]
    found: dict[str, dict[str, Any]] = {}
    for file in files:
        prefix = f"{file.name}: " if file != path else ""
        for location, state in _lifetimes(file).items():
            found[prefix + location] = state
    if not found:
        return None
    location = max(found, key=lambda key: _train_batches(found[key]))
    described = f"{location} (the model's lifetime, tracker_core.track_lifetime; {len(found)} found)"
    return ProgressCheckpoint(path, FORMAT, described, ({"progress": found[location]},))


def _read_url(url: str) -> ProgressCheckpoint | None:
    try:
        local = urls.local_path(url)
        if local is not None:
            return read_weights_lifetime(local)
        with urls.fetched(url) as copy:
            try:
                found = read_weights_lifetime(copy)
            except CheckpointFileError as error:
                raise CheckpointFileError(str(error).replace(str(copy), url)) from None
            return None if found is None else replace(found, path=url)
    except urls.UrlProblem:
        return None  # read_checkpoint has said why the URL cannot be read


def _weight_files(folder: Path) -> list[Path]:
    return sorted(file for file in folder.iterdir() if _WEIGHT_FILE.fullmatch(file.name) and file.is_file())


def _lifetimes(file: Path) -> dict[str, dict[str, Any]]:
    """Each lifetime in ``file`` by where it is, e.g. ``"state_dict['net.tracker_core_lifetime']"``."""
    if file.suffix == ".safetensors":
        return _safetensors_lifetimes(file)
    try:
        payload = _load(file)
    except CheckpointFileError:
        return {}  # read_checkpoint has said what is wrong with the file
    if isinstance(payload, Mapping) and isinstance(payload.get("state_dict"), Mapping):
        return _located("state_dict", payload["state_dict"], file)  # Lightning's weights-only checkpoint
    if isinstance(payload, Mapping):
        return _located("weights", payload, file)
    return {}


def _safetensors_lifetimes(file: Path) -> dict[str, dict[str, Any]]:
    problem = _safetensors_incomplete(file)
    if problem:
        raise CheckpointFileError(f"{file}: {problem}")
    try:
        from safetensors import safe_open
    except ImportError:
        raise CheckpointFileError(
            f"{file}: reading a safetensors file needs safetensors (pip install safetensors)"
        ) from None
    try:
        with safe_open(str(file), framework="pt") as tensors:
            return _located("weights", _Tensors(tensors), file)
    except CheckpointFileError:
        raise
    except Exception as error:  # untrusted bytes: whatever safetensors raises is the file's fault
        raise CheckpointFileError(f"{file}: damaged safetensors file ({type(error).__name__}: {error})") from None


class _Tensors(Mapping[str, Any]):
    """An open safetensors file as a mapping that reads a tensor only when it is asked for."""

    def __init__(self, tensors: Any) -> None:
        self._tensors = tensors
        self._names: list[str] = list(tensors.keys())

    def __getitem__(self, name: str) -> Any:
        return self._tensors.get_tensor(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _located(where: str, weights: Mapping[Any, Any], file: Path) -> dict[str, dict[str, Any]]:
    names = {key for key in weights if isinstance(key, str)}
    named = weights if len(names) == len(weights) else {key: weights[key] for key in names}
    try:
        return {f"{where}[{name!r}]": state for name, state in lifetimes_in(named).items()}
    except ProgressStateError as error:
        raise CheckpointFileError(f"{file}: damaged model lifetime at {where}: {error}") from None


def _train_batches(state: Mapping[str, Any]) -> int:
    return int(state["stages"]["train"]["batches"]["lifetime"]["completed"])


def _safetensors_incomplete(file: Path) -> str | None:
    """Why a safetensors file is cut short or damaged (its header against its size), or None."""
    size = file.stat().st_size
    with open(file, "rb") as stream:
        head = stream.read(8)
        if len(head) < 8:
            return "truncated safetensors file (no header)"
        (header_size,) = struct.unpack("<Q", head)
        if 8 + header_size > size:
            return "truncated safetensors file (header cut short)"
        try:
            header = json.loads(stream.read(header_size))
            spans = [t["data_offsets"] for k, t in header.items() if k != "__metadata__"]
            if not all(type(b) is int and type(e) is int and 0 <= b <= e for b, e in spans):
                return "damaged safetensors header (bad data offsets)"
            end = max((e for _, e in spans), default=0)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError):
            return "damaged safetensors header"
    if 8 + header_size + end != size:
        return f"truncated or damaged safetensors file ({size} bytes, {8 + header_size + end} expected)"
    return None
