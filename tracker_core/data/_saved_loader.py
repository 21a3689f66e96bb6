"""A saved train-loader state checked without its loader: everything a file alone can tell.

``LoaderPosition._parse`` checks a state against the live loader; this reader checks what
does not need one (types, bounds, the epoch record, RNG states, a ``StatefulDataLoader``'s
own layout), so that an entry whose loaders are registered after the load (Lightning, Ignite),
or a checkpoint file read by ``progress-tracker``, is refused before anything is applied.
Keys are relative to the loader's state (the Tracker prefixes ``train_loaders.<i>``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from tracker_core._errors import ProgressStateError
from tracker_core.data._compact import expand_loader
from tracker_core.data._position import (
    _EPOCH_KEYS,
    _KINDS,
    _OPTIONAL_EPOCH_KEYS,
    _OPTIONAL_STATE_KEYS,
    _STATE_KEYS,
    OLD_STATEFUL,
    STATE_VERSION,
    LoaderKind,
    _read_fast_forward,
)
from tracker_core.data._rng import GlobalRng, read_torch_cpu_state
from tracker_core.data._samplers import read_distributed
from tracker_core.data._torchdata_state import check_own_state, read_own_state
from tracker_core.state._codec import text_to_byte_tensor
from tracker_core.state._readers import join_key, read_int, read_mapping, read_str, shown

_ACCELERATOR_GENERATOR_BYTES = 16  # a CUDA/XPU/MPS Philox generator's state: seed and offset


def check_saved_loader(state: object, key: str = "", rng: Mapping[str, Any] | None = None) -> None:
    """Raise ``ProgressStateError`` naming the key for anything wrong in ``state`` that no loader is needed to see.

    ``rng``: the version 1 global snapshot saved beside ``state``, which its ``iterator_rng`` may refer to.
    """
    state = expand_loader(state, key, rng)
    if not isinstance(state, Mapping):
        raise ProgressStateError(key, f"expected a mapping, got {type(state).__name__}")
    if "kind" not in state:
        raise ProgressStateError(join_key(key, "kind"), "missing")
    kind = read_str(state["kind"], join_key(key, "kind"))
    if kind == "untracked":
        read_mapping(state, key, required=("kind",))
        return
    if kind == "stateful_dataloader":
        raise ProgressStateError(join_key(key, "kind"), OLD_STATEFUL)
    if kind not in _KINDS:
        raise ProgressStateError(join_key(key, "kind"), f"unknown kind {shown(kind)}; expected one of {list(_KINDS)}")
    fields = read_mapping(state, key, required=_STATE_KEYS, optional=_OPTIONAL_STATE_KEYS)
    if read_int(fields["version"], join_key(key, "version")) != STATE_VERSION:
        raise ProgressStateError(join_key(key, "version"), "unsupported version; this code reads 1 and 2")
    skip = read_int(fields["batches_consumed"], join_key(key, "batches_consumed"), minimum=0)
    per_epoch = fields["batches_per_epoch"]
    if per_epoch is not None:
        per_epoch = read_int(per_epoch, join_key(key, "batches_per_epoch"), minimum=0)
        if skip > per_epoch:
            raise ProgressStateError(
                join_key(key, "batches_consumed"), f"{skip} exceeds the {per_epoch} batches of an epoch"
            )
    workers = read_int(fields["num_workers"], join_key(key, "num_workers"), minimum=0)
    read_distributed(fields["distributed"], join_key(key, "distributed"))
    if "fast_forward" in fields:
        _read_fast_forward(fields["fast_forward"], join_key(key, "fast_forward"))
    _generators(fields["generators"], join_key(key, "generators"))
    epoch = fields["epoch"]
    drawn = epoch is not None
    if epoch is not None:
        drawn = _epoch(epoch, join_key(key, "epoch"), cast("LoaderKind", kind), workers, per_epoch)
    if skip and not drawn:
        raise ProgressStateError(
            join_key(key, "batches_consumed"), f"must be 0 in a state saved before any batch was drawn, got {skip}"
        )


def _epoch(value: object, key: str, kind: LoaderKind, workers: int, per_epoch: int | None) -> bool:
    """Check an epoch record; whether it knows the order of batches already drawn."""
    fields = read_mapping(value, key, required=_EPOCH_KEYS[kind], optional=_OPTIONAL_EPOCH_KEYS[kind])
    if fields["iterator_rng"] is not None:
        GlobalRng.from_plain(fields["iterator_rng"], join_key(key, "iterator_rng"))
    if fields["loader_generator"] is not None:
        _generator_state(fields["loader_generator"], join_key(key, "loader_generator"))
    if kind == "sampler_replay":
        if fields["sampler_rng"] is None:
            return False
        rng_key = join_key(key, "sampler_rng")
        rng = read_mapping(fields["sampler_rng"], rng_key, required=("torch", "generators", "epochs"))
        read_torch_cpu_state(rng["torch"], join_key(rng_key, "torch"))
        _generators(rng["generators"], join_key(rng_key, "generators"))
        epochs_key = join_key(rng_key, "epochs")
        epochs = rng["epochs"]
        if not isinstance(epochs, Mapping):
            raise ProgressStateError(epochs_key, f"expected a mapping, got {type(epochs).__name__}")
        for path, epoch in epochs.items():
            read_int(epoch, join_key(epochs_key, read_str(path, epochs_key)), minimum=0)
    if "loader_state" in fields or "loader_class" in fields:  # "own_state"
        check_own_state(read_own_state(fields, key), join_key(key, "loader_state"), workers, per_epoch)
    return True


def _generators(value: object, key: str) -> None:
    if not isinstance(value, Mapping):
        raise ProgressStateError(key, f"expected a mapping, got {type(value).__name__}")
    for path, state in value.items():
        _generator_state(state, join_key(key, read_str(path, key)))


def _generator_state(value: object, key: str) -> None:
    """A CPU generator's state (checked on a scratch generator) or an accelerator generator's 16 bytes."""
    state = text_to_byte_tensor(value, key)
    if state.numel() != _ACCELERATOR_GENERATOR_BYTES:
        read_torch_cpu_state(value, key)
