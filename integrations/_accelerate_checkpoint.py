"""The progress file written beside Accelerate's own checkpoint files, one per process.

``progress_tracker_{rank}.pt`` holds plain data plus gradient tensors and loads with
``torch.load(weights_only=True)``; it is written atomically (a temporary file, then a rename)::

    {"version": 4,
     "world_size": int,                         # the number of processes that saved (one file each)
     "rank": int,                               # the process that wrote this file
     "weights_crc32": [{name: int, ...}, ...],  # per model: CRC-32 of each tensor's bytes Accelerate saves
     "optimizers_crc32": [int, ...],            # per optimizer: CRC-32 of its state_dict (state_crc32)
     "schedulers_crc32": [int, ...],            # per scheduler: CRC-32 of its state_dict
     "scaler_crc32": int | None,                # CRC-32 of the GradScaler's state_dict (None: no scaler)
     "dataloaders_crc32": [int | None, ...],    # per prepared dataloader: CRC-32 of its state_dict (stateful only)
     "random_states_crc32": int,                # CRC-32 of this rank's random_states_{rank}.pkl (see rng_crc32)
     "tracker": <tracker_core.Tracker.state_dict()>,
     "gradients": [Tensor | None, ...],         # partial gradients of an accumulation window
     "save_iteration": int,                     # project_configuration.iteration of this save
     "loader_iterations": [{"now": int, "pass": int | None, "finished": bool} | None, ...],  # per train loader
     "evaluation_rng": {"stage": str, "rng": <global RNG snapshot>} | None}  # at an unfinished evaluation's start

The CRC-32s tie the folder's files to one save (:func:`same_save_problem`): Accelerate writes them
after this file, into the same folder, so a ``save_state`` killed part-way leaves older ones there.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import pickle
import random
import struct
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from tracker_core import ProgressStateError
from tracker_core.adapter import GlobalRng, read_int, read_mapping
from tracker_core.vocabulary import EVALUATION_STAGES

VERSION = 4  # 2 added "world_size" (a version 1 file is read as saved at the loading world size);
# 3 added "rank", "weights_crc32" and "optimizers_crc32", which tie the folder's files to one save;
# 4 added "schedulers_crc32", "scaler_crc32", "dataloaders_crc32" and "random_states_crc32" (Accelerate's other files)
_KEYS_V2 = ("version", "world_size", "tracker", "gradients", "save_iteration", "loader_iterations", "evaluation_rng")
_KEYS_V1 = tuple(key for key in _KEYS_V2 if key != "world_size")
_KEYS_V3 = (*_KEYS_V2, "rank", "weights_crc32", "optimizers_crc32")
_KEYS = (*_KEYS_V3, "schedulers_crc32", "scaler_crc32", "dataloaders_crc32", "random_states_crc32")
_TEMPORARY = ".progress_tracker_{}.pt.partial"
_MODEL_FILES = ("model{}.safetensors", "pytorch_model{}.bin")  # Accelerate's names for model i ("" or "_i")
_RNG_KEYS = ("step", "random_state", "numpy_random_seed", "torch_manual_seed")  # of random_states_{rank}.pkl
_CHUNK = 1 << 20
MIXED = "parts of this folder come from different saves (a save_state killed part-way, or two processes saving into it)"


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
    rank: int | None = None  # None: a file of version 1 or 2, which do not say
    weights_crc32: list[dict[str, int]] | None = None  # per model, tensor name -> CRC-32 of its bytes
    optimizers_crc32: list[int] | None = None  # per optimizer, state_crc32 of its state_dict
    schedulers_crc32: list[int] | None = None  # per scheduler, state_crc32 of its state_dict (None: before version 4)
    scaler_crc32: int | None = None  # state_crc32 of the GradScaler's state_dict (None: none, or before version 4)
    dataloaders_crc32: list[int | None] | None = None  # per prepared dataloader, of a stateful one's state_dict
    random_states_crc32: int | None = None  # rng_crc32 of this rank's random_states_{rank}.pkl (None: before 4)


def file_name(process_index: int) -> str:
    return f"progress_tracker_{process_index}.pt"


def write(directory: str, process_index: int, saved: SavedProgress) -> None:
    """Write atomically: a kill leaves the previous file or this one, never a mix; an ``OSError``
    (a full disk) names the file and leaves the previous one in place."""
    payload = {
        "version": VERSION,
        "world_size": saved.world_size,
        "rank": process_index,
        "weights_crc32": saved.weights_crc32,
        "optimizers_crc32": saved.optimizers_crc32,
        "schedulers_crc32": saved.schedulers_crc32,
        "scaler_crc32": saved.scaler_crc32,
        "dataloaders_crc32": saved.dataloaders_crc32,
        "random_states_crc32": saved.random_states_crc32,
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


def weights_crc32(weights: list[Any]) -> list[dict[str, int]]:
    """Per model state dict Accelerate is about to save: tensor name -> CRC-32 of the tensor's bytes."""
    return [
        {name: tensor_crc32(tensor) for name, tensor in state.items() if isinstance(tensor, torch.Tensor)}
        for state in weights
    ]


def tensor_crc32(tensor: torch.Tensor, crc: int = 0) -> int:
    """CRC-32 of a tensor's bytes in memory order (what safetensors and torch.save write), continuing ``crc``."""
    flat = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
    if flat.numel() == 0:
        return crc
    # the tensor's own memory, without NumPy (a torch-only install reads folders written with NumPy present)
    memory = (ctypes.c_ubyte * flat.numel()).from_address(flat.data_ptr())
    return zlib.crc32(memoryview(memory), crc)


def state_crc32(state: object) -> int:
    """CRC-32 of a nested state (an optimizer's ``state_dict()``): keys, plain values and tensor bytes, in order."""
    crc = 0
    stack: list[object] = [state]
    while stack:
        item = stack.pop()
        if isinstance(item, torch.Tensor):
            crc = tensor_crc32(item, zlib.crc32(f"T{item.dtype}{tuple(item.shape)}".encode(), crc))
        elif type(item).__name__ == "ndarray" and type(item).__module__ == "numpy":  # NumPy need not be installed
            array: Any = item
            crc = zlib.crc32(array.tobytes(), zlib.crc32(f"A{array.dtype}{array.shape}".encode(), crc))
        elif isinstance(item, dict):
            crc = zlib.crc32(b"{", crc)
            for name in sorted(item, key=repr, reverse=True):
                stack.extend((item[name], f"K{name!r}"))
        elif isinstance(item, (list, tuple)):
            crc = zlib.crc32(b"[", crc)
            stack.extend(reversed(item))
        else:
            crc = zlib.crc32(repr(item).encode(), crc)
    return crc


def rng_crc32(states: Mapping[str, Any]) -> int:
    """CRC-32 of what a ``random_states_{rank}.pkl`` holds: Accelerate's step and the global RNGs of Python,
    NumPy and torch's CPU (an accelerator's generators, which Accelerate saves too, are not covered)."""
    return state_crc32([states.get(key) for key in _RNG_KEYS])


def save_rng_crc32(step: int) -> int:
    """:func:`rng_crc32` of the file Accelerate's ``save_state`` is about to write (nothing draws in between)."""
    import numpy as np  # Accelerate requires it

    return rng_crc32(
        {
            "step": step,
            "random_state": random.getstate(),
            "numpy_random_seed": np.random.get_state(),
            "torch_manual_seed": torch.get_rng_state(),
        }
    )


def same_save_problem(directory: str, ranks: Mapping[int, SavedProgress], load: Callable[[str], Any]) -> str | None:
    """Why the files Accelerate wrote into ``directory`` do not all come from the save that wrote the progress
    files in ``ranks`` (rank -> its file, rank 0's among them), or None. Rank 0's file covers the weights,
    optimizer, scheduler, scaler and stateful dataloader files, each rank's its ``random_states_{rank}.pkl``;
    ``load`` reads a torch file (``weights_only=True``). Not covered: ``sampler*.bin`` (a pickled sampler object,
    which ``weights_only=True`` cannot read) and accelerator generators (see docs/accelerate.md)."""
    first = ranks.get(0)
    if first is not None:
        for index, recorded in enumerate(first.weights_crc32 or []):
            suffix = "" if index == 0 else f"_{index}"
            for pattern in _MODEL_FILES:
                file = os.path.join(directory, pattern.format(suffix))
                if os.path.isfile(file):
                    found = _safetensors_crc32(file) if file.endswith(".safetensors") else _torch_crc32(file, load)
                    changed = sorted(name for name, crc in found.items() if recorded.get(name) != crc)
                    if changed:
                        return (
                            f"{os.path.basename(file)} does not hold the weights of this save (tensor {changed[0]!r})"
                        )
        files = [
            *(("optimizer", i, crc) for i, crc in enumerate(first.optimizers_crc32 or [])),
            *(("scheduler", i, crc) for i, crc in enumerate(first.schedulers_crc32 or [])),
        ]
        for name, index, crc in files:
            file = os.path.join(directory, f"{name}.bin" if index == 0 else f"{name}_{index}.bin")
            if os.path.isfile(file) and state_crc32(load(file)) != crc:
                return f"{os.path.basename(file)} does not hold the {name} state of this save"
        for index, loader_crc in enumerate(first.dataloaders_crc32 or []):
            file = os.path.join(directory, "dl_state_dict.bin" if index == 0 else f"dl_state_dict_{index}.bin")
            if loader_crc is not None and os.path.isfile(file) and state_crc32(load(file)) != loader_crc:
                return f"{os.path.basename(file)} does not hold the dataloader state of this save"
        scaler = os.path.join(directory, "scaler.pt")
        if (
            first.scaler_crc32 is not None
            and os.path.isfile(scaler)
            and state_crc32(load(scaler)) != first.scaler_crc32
        ):
            return "scaler.pt does not hold the GradScaler state of this save"
    numpy_globals = _numpy_globals()
    for rank, saved in ranks.items():
        file = os.path.join(directory, f"random_states_{rank}.pkl")
        if saved.random_states_crc32 is None or not os.path.isfile(file) or not numpy_globals:
            continue  # without NumPy its arrays cannot be read (nor loaded: Accelerate requires NumPy)
        with torch.serialization.safe_globals(numpy_globals):
            states = load(file)
        if not isinstance(states, Mapping) or rng_crc32(states) != saved.random_states_crc32:
            return f"random_states_{rank}.pkl does not hold the RNG states of this save"
    return None


def rng_files_readable() -> bool:
    """Whether ``random_states_{rank}.pkl`` files can be read here (NumPy importable); else they go unchecked."""
    return bool(_numpy_globals())


def _numpy_globals() -> list[Any]:
    """What a ``random_states_{rank}.pkl`` needs beyond ``torch.load(weights_only=True)``'s defaults: NumPy
    arrays (Accelerate's own load allows the same); none without NumPy (such a file is then not read)."""
    try:
        import numpy as np
    except ImportError:
        return []
    core = getattr(np, "_core", None) or np.core
    return [core.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


def check_same_save(directory: str, ranks: Mapping[int, SavedProgress]) -> None:
    """:func:`same_save_problem` for ``load_state``: ``ProgressStateError`` before anything is loaded."""
    problem = same_save_problem(directory, ranks, _load_torch_file)
    if problem is not None:
        raise ProgressStateError("", f"{directory}: {MIXED}: {problem}; nothing was loaded")


def _load_torch_file(file: str) -> Any:
    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise ProgressStateError(
            "", f"{file} is refused by torch.load(weights_only=True), which never runs pickled code"
        ) from None
    except Exception as exc:  # untrusted bytes: any failure to read them is the file's fault
        reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        raise ProgressStateError("", f"{file} is not a readable torch file ({reason})") from None


def _torch_crc32(file: str, load: Callable[[str], Any]) -> dict[str, int]:
    weights = load(file)
    if not isinstance(weights, Mapping):
        return {"": -1}  # not a state dict: differs from every recorded one
    return {str(name): tensor_crc32(t) for name, t in weights.items() if isinstance(t, torch.Tensor)}


def _safetensors_crc32(file: str) -> dict[str, int]:
    """Tensor name -> CRC-32 of its bytes, read from the file without a safetensors library; a damaged
    header reads as a mismatch (``{"": -1}``)."""
    with open(file, "rb") as stream:
        try:
            (header_size,) = struct.unpack("<Q", stream.read(8))
            header = json.loads(stream.read(min(header_size, 100_000_000)))
            spans = {str(k): t["data_offsets"] for k, t in header.items() if k != "__metadata__"}
        except (ValueError, TypeError, KeyError, AttributeError, struct.error, RecursionError):
            return {"": -1}
        found = {}
        for name, (begin, end) in sorted(spans.items()):
            stream.seek(8 + header_size + begin)
            crc, left = 0, end - begin
            while left > 0:
                chunk = stream.read(min(left, _CHUNK))
                if not chunk:
                    return {"": -1}
                crc, left = zlib.crc32(chunk, crc), left - len(chunk)
            found[name] = crc
    return found


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
    if not os.path.isfile(path):
        raise ProgressStateError("", f"{path} is not a regular file")
    try:
        payload = torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError:
        raise ProgressStateError(
            "", f"{path} is refused by torch.load(weights_only=True), which never runs pickled code"
        ) from None
    except Exception as exc:  # untrusted bytes: any failure to read them is the file's fault
        reason = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        raise ProgressStateError("", f"{path} is not a readable progress file ({reason})") from None
    version = payload.get("version") if isinstance(payload, dict) else None
    keys = {1: _KEYS_V1, 2: _KEYS_V2, 3: _KEYS_V3}.get(version, _KEYS) if type(version) is int else _KEYS
    payload = dict(read_mapping(payload, "", required=keys))
    if type(payload["version"]) is not int or payload["version"] not in (1, 2, 3, VERSION):
        raise ProgressStateError(
            "version", f"unsupported version {payload['version']!r:.40}; this code reads 1 to {VERSION}"
        )
    gradients = payload["gradients"]
    if not isinstance(gradients, list) or not all(g is None or isinstance(g, torch.Tensor) for g in gradients):
        raise ProgressStateError("gradients", "expected a list of tensors and None")
    rank = crcs = optimizers = schedulers = scaler = loaders = rng = None
    if payload["version"] >= 3:
        rank = read_int(payload["rank"], "rank", minimum=0)
        crcs = _weights_crc32(payload["weights_crc32"])
        optimizers = _crc32_list(payload["optimizers_crc32"], "optimizers_crc32")
    if payload["version"] >= 4:
        schedulers = _crc32_list(payload["schedulers_crc32"], "schedulers_crc32")
        scaler = None if payload["scaler_crc32"] is None else _crc32(payload["scaler_crc32"], "scaler_crc32")
        rng = _crc32(payload["random_states_crc32"], "random_states_crc32")
        loaders = payload["dataloaders_crc32"]
        if not isinstance(loaders, list) or not all(c is None or (type(c) is int and 0 <= c < 2**32) for c in loaders):
            raise ProgressStateError("dataloaders_crc32", "expected a list of CRC-32 values and None")
    return SavedProgress(
        world_size=None if payload["version"] == 1 else read_int(payload["world_size"], "world_size", minimum=1),
        tracker=payload["tracker"],
        gradients=gradients,
        save_iteration=read_int(payload["save_iteration"], "save_iteration", minimum=0),
        loader_iterations=_loader_iterations(payload["loader_iterations"]),
        evaluation_rng=_evaluation_rng(payload["evaluation_rng"]),
        rank=rank,
        weights_crc32=crcs,
        optimizers_crc32=optimizers,
        schedulers_crc32=schedulers,
        scaler_crc32=scaler,
        dataloaders_crc32=loaders,
        random_states_crc32=rng,
    )


def _crc32(value: object, key: str) -> int:
    if type(value) is not int or not 0 <= value < 2**32:
        raise ProgressStateError(key, "expected a CRC-32 value")
    return value


def _crc32_list(value: object, key: str) -> list[int]:
    if not isinstance(value, list) or not all(type(c) is int and 0 <= c < 2**32 for c in value):
        raise ProgressStateError(key, "expected a list of CRC-32 values")
    return value


def _weights_crc32(value: object) -> list[dict[str, int]]:
    if not isinstance(value, list):
        raise ProgressStateError("weights_crc32", f"expected a list, got {type(value).__name__}")
    for index, model in enumerate(value):
        key = f"weights_crc32.{index}"
        if not isinstance(model, dict):
            raise ProgressStateError(key, f"expected a dict, got {type(model).__name__}")
        for name, crc in model.items():
            if not isinstance(name, str) or type(crc) is not int or not 0 <= crc < 2**32:
                raise ProgressStateError(f"{key}.{str(name)[:40]}", "expected a tensor name and a CRC-32")
    return value


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
