"""A saved train-loader state checked without its loader, so that an entry whose loaders are registered after the
load (Lightning, Ignite), or a file ``progress-tracker`` reads, is refused before anything is applied
(``LoaderPosition.check`` adds the checks against the live loader). Keys are relative to the loader's state."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, cast

from tracker_core._errors import ProgressStateError
from tracker_core.data._compact import blob_bytes_of, expand_loader
from tracker_core.data._own_state import LoaderKind
from tracker_core.data._rng import read_generator_state
from tracker_core.data._samplers import read_distributed
from tracker_core.data._torchdata_state import check_own_state, read_own_state
from tracker_core.state._readers import is_mapping, join_key, read_int, read_mapping, read_str, read_version, shown

STATE_VERSION = 3  # saved with short blobs (``_compact.py``), checked expanded
_STATE_KEYS = (
    "version",
    "kind",
    "batches_consumed",
    "batches_per_epoch",
    "num_workers",
    "generators",
    "epoch",
    "distributed",
)
_OPTIONAL_STATE_KEYS = ("fast_forward",)  # present when the resume before this checkpoint read batches again
# Each kind's optional epoch fields (a plain loader's record is empty: saved inside an epoch).
_EPOCH_KEYS: dict[str, tuple[str, ...]] = {"plain": (), "own_state": ("loader_class", "loader_state")}

_ACCELERATOR_GENERATOR_BYTES = 16  # a CUDA/XPU/MPS Philox generator's state: seed and offset


@dataclass(frozen=True)
class SavedLoader:
    """A saved loader state, read and checked without its loader (``LoaderPosition`` checks it against its own)."""

    kind: LoaderKind
    fields: Mapping[str, Any]  # the state's top-level fields
    skip: int  # batches_consumed
    per_epoch: int | None
    workers: int
    distributed: dict[str, Any] | None
    epoch: Mapping[str, Any] | None = None  # the epoch record's fields, once check_saved_epoch read them


def read_header(state: object, key: str, kind: str | None = None) -> SavedLoader:
    """Check the top-level fields of an expanded loader state (``kind``: the one the live loader resumes by, if
    any); the generators and the epoch record are left to :func:`check_saved_epoch`."""
    if not is_mapping(state):
        raise ProgressStateError(key, f"expected a mapping, got {type(state).__name__}")
    for name in ("version", "kind"):
        if name not in state:
            raise ProgressStateError(join_key(key, name), "missing")
    read_version(state["version"], join_key(key, "version"), STATE_VERSION)  # before the keys of another version
    saved = read_str(state["kind"], join_key(key, "kind"))
    if saved not in _EPOCH_KEYS:
        raise ProgressStateError(
            join_key(key, "kind"), f"unknown kind {shown(saved)}; expected one of {list(_EPOCH_KEYS)}"
        )
    if kind is not None:
        check_kind(saved, kind, key)
    fields = read_mapping(state, key, required=_STATE_KEYS, optional=_OPTIONAL_STATE_KEYS)
    skip = read_int(fields["batches_consumed"], join_key(key, "batches_consumed"), minimum=0)
    per_epoch = fields["batches_per_epoch"]
    if per_epoch is not None:
        per_epoch = read_int(per_epoch, join_key(key, "batches_per_epoch"), minimum=0)
        if skip > per_epoch:
            raise ProgressStateError(
                join_key(key, "batches_consumed"), f"{skip} exceeds the {per_epoch} batches of an epoch"
            )
    workers = read_int(fields["num_workers"], join_key(key, "num_workers"), minimum=0)
    distributed = read_distributed(fields["distributed"], join_key(key, "distributed"))
    if "fast_forward" in fields:
        _read_fast_forward(fields["fast_forward"], join_key(key, "fast_forward"))
    return SavedLoader(cast("LoaderKind", saved), fields, skip, per_epoch, workers, distributed)


def check_kind(saved: str, kind: str, key: str) -> None:
    """Refuse a state saved from a loader that resumes by another kind than the live loader's ``kind``."""
    if saved != kind:
        raise ProgressStateError(
            join_key(key, "kind"), f"saved from a {saved!r} loader; this loader resumes by {kind!r}"
        )


def _read_fast_forward(value: object, key: str) -> None:
    fields = read_mapping(value, key, required=("batches", "seconds"))
    seconds = fields["seconds"]
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
        raise ProgressStateError(join_key(key, "seconds"), f"expected a number >= 0, got {shown(seconds)}")
    read_int(fields["batches"], join_key(key, "batches"), minimum=1)


def check_saved_loader(state: object, key: str = "") -> SavedLoader:
    """Raise ``ProgressStateError`` naming the key for anything wrong in ``state`` that no loader is needed to see."""
    return check_saved_epoch(read_header(expand_loader(state, key), key), key)


def check_saved_epoch(header: SavedLoader, key: str = "") -> SavedLoader:
    """The rest of :func:`check_saved_loader` once the header is read: the generators and the epoch record."""
    generators, generators_key = header.fields["generators"], join_key(key, "generators")
    if not isinstance(generators, Mapping):
        raise ProgressStateError(generators_key, f"expected a mapping, got {type(generators).__name__}")
    for path, value in generators.items():  # by path: a CPU generator's state, or an accelerator generator's 16 bytes
        value_key = join_key(generators_key, read_str(path, generators_key))
        if len(blob_bytes_of(value, value_key)) != _ACCELERATOR_GENERATOR_BYTES:
            read_generator_state(value, value_key)  # checked on a scratch generator
    epoch, epoch_key = header.fields["epoch"], join_key(key, "epoch")
    if epoch is not None:
        epoch = read_mapping(epoch, epoch_key, required=(), optional=_EPOCH_KEYS[header.kind])
        if "loader_state" in epoch or "loader_class" in epoch:  # "own_state"
            own = read_own_state(epoch, epoch_key)
            check_own_state(own, join_key(epoch_key, "loader_state"), header.workers, header.per_epoch)
    if header.skip and epoch is None and header.kind != "plain":
        raise ProgressStateError(
            join_key(key, "batches_consumed"),
            f"must be 0 in a state saved before any batch was drawn, got {header.skip}",
        )
    return replace(header, epoch=epoch)
