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

import torch

from tracker_core._errors import ProgressStateError
from tracker_core.data._compact import expand_loader
from tracker_core.data._position import (
    _EPOCH_KEYS,
    _KINDS,
    _OPTIONAL_EPOCH_KEYS,
    _OPTIONAL_STATE_KEYS,
    _STATE_KEYS,
    STATE_VERSION,
    LoaderKind,
    _read_fast_forward,
)
from tracker_core.data._rng import GlobalRng, read_torch_cpu_state
from tracker_core.data._samplers import read_distributed
from tracker_core.state._codec import from_plain, text_to_byte_tensor
from tracker_core.state._readers import join_key, read_int, read_mapping, read_str, shown

_ACCELERATOR_GENERATOR_BYTES = 16  # a CUDA/XPU/MPS Philox generator's state: seed and offset

# torchdata 0.11 StatefulDataLoader layouts (num_workers == 0, and > 0)
_SINGLE_KEYS = (
    "_index_sampler_state",
    "_sampler_iter_state",
    "_sampler_iter_yielded",
    "_num_yielded",
    "_IterableDataset_len_called",
    "_shared_seed",
    "fetcher_state",
    "dataset_state",
    "_iterator_finished",
)
_MULTI_KEYS = ("_snapshot", "_steps_since_snapshot", "_iterator_finished")
_SNAPSHOT_KEYS = ("_snapshot_step", "_last_yielded_worker_id", "_main_snapshot", "_worker_snapshots")
_MAIN_SNAPSHOT_KEYS = (
    "_num_workers",
    "_sampler_iter_state",
    "_index_sampler_state",
    "_sampler_iter_yielded",
    "_IterableDataset_len_called",
    "_shared_seed",
    "_base_seed",
)
_WORKER_KEYS = ("worker_id", "dataset_state", "fetcher_state")


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
        drawn = _epoch(epoch, join_key(key, "epoch"), cast("LoaderKind", kind), workers, per_epoch, skip)
    if skip and not drawn:
        raise ProgressStateError(
            join_key(key, "batches_consumed"), f"must be 0 in a state saved before any batch was drawn, got {skip}"
        )


def _epoch(value: object, key: str, kind: LoaderKind, workers: int, per_epoch: int | None, skip: int) -> bool:
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
    if kind == "stateful_dataloader":
        state_key = join_key(key, "loader_state")
        if not isinstance(fields["loader_state"], Mapping):
            raise ProgressStateError(state_key, f"expected a mapping, got {type(fields['loader_state']).__name__}")
        check_stateful_state(from_plain(fields["loader_state"], state_key), state_key, workers, per_epoch)
        if "loader_state_batch" in fields:
            batch_key = join_key(key, "loader_state_batch")
            if read_int(fields["loader_state_batch"], batch_key, minimum=0) > skip:
                raise ProgressStateError(batch_key, f"past the {skip} consumed batches")
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


def check_stateful_state(state: Mapping[str, Any], key: str, workers: int, per_epoch: int | None) -> None:
    """A decoded ``StatefulDataLoader.state_dict()``: torchdata's own keys, their types and bounds
    (the parts a sampler or dataset defines are only bounded, by the decoder)."""
    if workers == 0:
        fields = read_mapping(state, key, required=_SINGLE_KEYS)
        _main_state(fields, key, per_epoch)
        _batch_count(fields["_num_yielded"], join_key(key, "_num_yielded"), per_epoch)
        _fetcher_state(fields["fetcher_state"], join_key(key, "fetcher_state"))
        _bool(fields["_iterator_finished"], join_key(key, "_iterator_finished"))
        return
    fields = read_mapping(state, key, required=_MULTI_KEYS)
    _batch_count(fields["_steps_since_snapshot"], join_key(key, "_steps_since_snapshot"), per_epoch)
    _bool(fields["_iterator_finished"], join_key(key, "_iterator_finished"))
    snapshot_key = join_key(key, "_snapshot")
    snapshot = read_mapping(fields["_snapshot"], snapshot_key, required=_SNAPSHOT_KEYS)
    _batch_count(snapshot["_snapshot_step"], join_key(snapshot_key, "_snapshot_step"), per_epoch)
    main_key = join_key(snapshot_key, "_main_snapshot")
    main = read_mapping(snapshot["_main_snapshot"], main_key, required=_MAIN_SNAPSHOT_KEYS)
    _main_state(main, main_key, per_epoch)
    if read_int(main["_num_workers"], join_key(main_key, "_num_workers")) != workers:
        raise ProgressStateError(join_key(main_key, "_num_workers"), f"expected {workers}, the saved num_workers")
    read_int(main["_base_seed"], join_key(main_key, "_base_seed"))
    last = read_int(snapshot["_last_yielded_worker_id"], join_key(snapshot_key, "_last_yielded_worker_id"), minimum=0)
    if last >= workers:
        raise ProgressStateError(
            join_key(snapshot_key, "_last_yielded_worker_id"), f"{last} is not one of the {workers} workers"
        )
    workers_key = join_key(snapshot_key, "_worker_snapshots")
    names = [f"worker_{i}" for i in range(workers)]
    snapshots = read_mapping(snapshot["_worker_snapshots"], workers_key, required=names)
    for index, name in enumerate(names):
        worker_key = join_key(workers_key, name)
        worker = read_mapping(snapshots[name], worker_key, required=_WORKER_KEYS)
        if read_int(worker["worker_id"], join_key(worker_key, "worker_id")) != index:
            raise ProgressStateError(join_key(worker_key, "worker_id"), f"expected {index}")
        _fetcher_state(worker["fetcher_state"], join_key(worker_key, "fetcher_state"))


def _main_state(fields: Mapping[str, Any], key: str, per_epoch: int | None) -> None:
    _batch_count(fields["_sampler_iter_yielded"], join_key(key, "_sampler_iter_yielded"), per_epoch)
    for name in ("_IterableDataset_len_called", "_shared_seed"):
        if fields[name] is not None:
            read_int(fields[name], join_key(key, name))
    _sampler_iter_state(fields["_sampler_iter_state"], join_key(key, "_sampler_iter_state"))


def _sampler_iter_state(value: object, key: str) -> None:
    """torchdata's own sampler iterators: ``BatchSampler`` (``samples_yielded``) over ``RandomSampler``
    (``yielded``, ``generator``); another sampler's state is its own business."""
    if value is None:
        return
    if not isinstance(value, Mapping) or not value:  # torchdata saves a Stateful sampler's state_dict(), else None
        raise ProgressStateError(key, f"expected None or a sampler's non-empty state, got {_short(value)}")
    if {"samples_yielded", "sampler_state", "sampler_iter_state"} & set(value):
        fields = read_mapping(
            value, key, required=("samples_yielded",), optional=("sampler_state", "sampler_iter_state")
        )
        read_int(fields["samples_yielded"], join_key(key, "samples_yielded"), minimum=0)
        for name in ("sampler_state", "sampler_iter_state"):  # present: torchdata loads them unconditionally
            if name in fields:
                if fields[name] is None:
                    raise ProgressStateError(join_key(key, name), "expected a sampler's state, got None")
                _sampler_iter_state(fields[name], join_key(key, name))
    elif {"yielded", "generator"} & set(value):
        read_mapping(value, key, required=("yielded", "generator"))
        read_int(value["yielded"], join_key(key, "yielded"), minimum=0)
        generator = value["generator"]
        if not isinstance(generator, torch.Tensor) or generator.dtype != torch.uint8 or generator.dim() != 1:
            raise ProgressStateError(join_key(key, "generator"), "expected a 1-d uint8 tensor (a generator state)")
        try:
            torch.Generator().set_state(generator)
        except RuntimeError as error:
            raise ProgressStateError(join_key(key, "generator"), f"not a torch CPU RNG state ({error})") from None


def _fetcher_state(value: object, key: str) -> None:
    if value is not None:
        fields = read_mapping(value, key, required=("dataset_iter_state", "fetcher_ended"))
        _bool(fields["fetcher_ended"], join_key(key, "fetcher_ended"))


def _batch_count(value: object, key: str, per_epoch: int | None) -> None:
    count = read_int(value, key, minimum=0)
    if per_epoch is not None and count > per_epoch:
        raise ProgressStateError(key, f"{count} exceeds the {per_epoch} batches of an epoch")


def _bool(value: object, key: str) -> None:
    if not isinstance(value, bool):
        raise ProgressStateError(key, f"expected a bool, got {type(value).__name__}")


def _short(value: object) -> str:
    return "an empty mapping" if isinstance(value, Mapping) else f"a {type(value).__name__}"
