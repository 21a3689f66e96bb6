"""A loader's own saved state (kind ``"own_state"``) read back, and a torchdata 0.11 ``StatefulDataLoader``'s layout
checked as data before torchdata loads it, which is only when the resumed iterator is built: too late to refuse it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from tracker_core._errors import ProgressStateError
from tracker_core.data._rng import checked_generator_state
from tracker_core.state._codec import from_plain
from tracker_core.state._readers import join_key, read_bool, read_int, read_mapping, read_str

TORCHDATA_LOADER = "torchdata.stateful_dataloader.stateful_dataloader.StatefulDataLoader"


def class_name(loader: object) -> str:
    """The loader's class, as an ``"own_state"`` epoch record saves it beside the loader's state."""
    return f"{type(loader).__module__}.{type(loader).__qualname__}"


def read_own_state(fields: Mapping[str, Any], key: str) -> tuple[str, Mapping[str, Any]]:
    """The saved ``(loader_class, loader_state)`` of an epoch record's ``fields`` (both or neither are saved)."""
    if "loader_class" not in fields:
        raise ProgressStateError(join_key(key, "loader_class"), "missing (saved with loader_state)")
    if "loader_state" not in fields:
        raise ProgressStateError(join_key(key, "loader_state"), "missing (saved with loader_class)")
    name = read_str(fields["loader_class"], join_key(key, "loader_class"))
    state = fields["loader_state"]
    if not isinstance(state, Mapping):
        raise ProgressStateError(join_key(key, "loader_state"), f"expected a mapping, got {type(state).__name__}")
    return name, state


def check_own_state(saved: tuple[str, Mapping[str, Any]], key: str, workers: int, per_epoch: int | None) -> None:
    """Decode the state of :func:`read_own_state`; a torchdata ``StatefulDataLoader``'s is checked too (another
    loader's layout is its own business: only bounded, by the decoder)."""
    state = from_plain(saved[1], key)
    if saved[0] == TORCHDATA_LOADER:
        check_stateful_state(state, key, workers, per_epoch)


# torchdata 0.11 StatefulDataLoader layouts (num_workers == 0, and > 0): the main process's keys, and the rest
_MAIN_KEYS = (
    "_index_sampler_state",
    "_sampler_iter_state",
    "_sampler_iter_yielded",
    "_IterableDataset_len_called",
    "_shared_seed",
)
_SINGLE_KEYS = (*_MAIN_KEYS, "_num_yielded", "fetcher_state", "dataset_state", "_iterator_finished")
_MULTI_KEYS = ("_snapshot", "_steps_since_snapshot", "_iterator_finished")
_SNAPSHOT_KEYS = ("_snapshot_step", "_last_yielded_worker_id", "_main_snapshot", "_worker_snapshots")
_MAIN_SNAPSHOT_KEYS = (*_MAIN_KEYS, "_num_workers", "_base_seed")
_WORKER_KEYS = ("worker_id", "dataset_state", "fetcher_state")


def check_stateful_state(state: Mapping[str, Any], key: str, workers: int, per_epoch: int | None) -> None:
    """A decoded ``StatefulDataLoader.state_dict()``: torchdata's own keys, their types and bounds
    (the parts a sampler or dataset defines are only bounded, by the decoder)."""
    if workers == 0:
        fields = read_mapping(state, key, required=_SINGLE_KEYS)
        _main_state(fields, key, per_epoch)
        _batch_count(fields["_num_yielded"], join_key(key, "_num_yielded"), per_epoch)
        _fetcher_state(fields["fetcher_state"], join_key(key, "fetcher_state"))
        read_bool(fields["_iterator_finished"], join_key(key, "_iterator_finished"))
        return
    fields = read_mapping(state, key, required=_MULTI_KEYS)
    _batch_count(fields["_steps_since_snapshot"], join_key(key, "_steps_since_snapshot"), per_epoch)
    read_bool(fields["_iterator_finished"], join_key(key, "_iterator_finished"))
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
        shown = "an empty mapping" if isinstance(value, Mapping) else f"a {type(value).__name__}"
        raise ProgressStateError(key, f"expected None or a sampler's non-empty state, got {shown}")
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
        checked_generator_state(generator, join_key(key, "generator"))


def _fetcher_state(value: object, key: str) -> None:
    if value is not None:
        fields = read_mapping(value, key, required=("dataset_iter_state", "fetcher_ended"))
        read_bool(fields["fetcher_ended"], join_key(key, "fetcher_ended"))


def _batch_count(value: object, key: str, per_epoch: int | None) -> None:
    count = read_int(value, key, minimum=0)
    if per_epoch is not None and count > per_epoch:
        raise ProgressStateError(key, f"{count} exceeds the {per_epoch} batches of an epoch")
