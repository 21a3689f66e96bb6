"""The lifetime a model's weights carry (``tracker_core.track_lifetime``), read where a path holds no trainer
checkpoint (docs/cli.md, "Weights only")."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import tracker_core.checkpoints._urls as urls
from tracker_core._errors import ProgressStateError
from tracker_core.checkpoints import CheckpointFileError, ProgressCheckpoint, _load, _local_or_url, _mode
from tracker_core.state._model_lifetime import BUFFER, lifetimes_in, train_batches

FORMAT = "weights"
_WEIGHT_FILE = re.compile(r"(model|pytorch_model)(-\d+-of-\d+)?\.(safetensors|bin)")  # Accelerate's save_model


def read_weights_lifetime(path: str | os.PathLike[str]) -> ProgressCheckpoint | None:
    """The furthest lifetime in the weights at ``path`` (a file, an Accelerate ``save_model`` folder or their
    URL) as a checkpoint of format ``"weights"`` with one entry, ``{"progress": state}``; None if there is none.
    ``CheckpointFileError`` names the file if a lifetime or a safetensors file is damaged."""
    found = _local_or_url(path)
    return _read_url(found) if isinstance(found, str) else _read_local(found)


def _read_local(path: Path) -> ProgressCheckpoint | None:
    mode = _mode(path)
    if mode is None:
        return None
    files = _weight_files(path) if stat.S_ISDIR(mode) else [path]
    found = {
        (f"{file.name}: " if file != path else "") + location: state
        for file in files
        for location, state in _lifetimes(file).items()
    }
    if not found:
        return None
    location = max(found, key=lambda key: train_batches(found[key]))
    described = f"{location} (the model's lifetime, tracker_core.track_lifetime; {len(found)} found)"
    return ProgressCheckpoint(path, FORMAT, described, ({"progress": found[location]},))


def _read_url(url: str) -> ProgressCheckpoint | None:
    try:
        with urls.fetched(url, CheckpointFileError) as copy:
            found = _read_local(copy)
    except urls.UrlProblem:
        return None  # read_checkpoint has said why the URL cannot be read
    return None if found is None else replace(found, path=url)


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
    if not isinstance(payload, Mapping):
        return {}
    if isinstance(payload.get("state_dict"), Mapping):  # Lightning's weights-only checkpoint
        return _located("state_dict", payload["state_dict"], file)
    return _located("weights", payload, file)


def _safetensors_lifetimes(file: Path) -> dict[str, dict[str, Any]]:
    try:
        from safetensors import safe_open
    except ImportError:
        raise CheckpointFileError(
            f"{file}: reading a safetensors file needs safetensors (pip install safetensors)"
        ) from None
    try:
        with safe_open(str(file), framework="pt") as tensors:
            names = tensors.keys()  # only the lifetime buffers are read
            lifetimes = {name: tensors.get_tensor(name) for name in names if name.rpartition(".")[2] == BUFFER}
    except Exception as error:  # untrusted bytes (cut short, a bad header): whatever safetensors raises
        raise CheckpointFileError(f"{file}: damaged safetensors file ({type(error).__name__}: {error})") from None
    return _located("weights", lifetimes, file)


def _located(where: str, weights: Mapping[Any, Any], file: Path) -> dict[str, dict[str, Any]]:
    named = {key: value for key, value in weights.items() if isinstance(key, str)}
    try:
        return {f"{where}[{name!r}]": state for name, state in lifetimes_in(named).items()}
    except ProgressStateError as error:
        raise CheckpointFileError(f"{file}: damaged model lifetime at {where}: {error}") from None
