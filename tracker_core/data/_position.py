"""Make a DataLoader resumable at a batch position, in place ("data position is progress").

``LoaderPosition(loader)`` hooks the very loader object a framework holds. Whenever an
epoch's iteration begins it notes what fixes that epoch's order. At checkpoint time
``state_dict(batches_consumed=k)`` saves that note plus ``k``, taken from the progress
counters (frameworks prefetch, so the loader may have yielded more than ``k``). In a fresh
process ``load_state_dict(state)`` on an identically configured loader makes its next
epoch yield exactly batches ``k, k+1, ...`` of the saved epoch, and every later epoch as in
the uninterrupted run. Restore the global RNGs with ``restore_rng_state`` as well.

Mechanisms, named by the state's ``kind``:

* ``"sampler_replay"``: torch ``DataLoader`` over a map-style dataset. When the iterator
  is built, the global RNGs and ``loader.generator`` are noted (they give the workers'
  base seed). When the index sampler starts, torch's RNG, the samplers' ``generator``
  states and ``epoch`` (``DistributedSampler``) are noted. A replay re-applies both and
  drops the first ``k`` batches of *indices*: skipped samples are never loaded, also with
  workers (the skip happens before indices are sent to them).
* ``"iterable_replay"``: torch ``DataLoader`` over an ``IterableDataset``. The iterator
  is rebuilt under the noted RNGs (so workers get the same seeds), then ``k`` batches are
  read and dropped.
* ``"stateful_dataloader"``: torchdata ``StatefulDataLoader``. Its own ``state_dict()``
  taken when the epoch's iterator is built (tensors as base64) is loaded back, then ``k``
  batches are read and dropped; its workers thus replay their RNG streams as well.

Every replay runs inside a save/restore of the global RNGs, so the stream the caller
restored from its checkpoint continues undisturbed.

What cannot be exact:

* ``IterableDataset``: exact only if the iterable yields the same sequence in an epoch
  given the loader's seeds (randomness drawn in workers, or when ``iter(dataset)`` runs,
  is replayed). Fewer batches than ``k`` on resume raise ``ProgressStateError``.
* ``num_workers=0`` with a prefetching framework: random draws the dataset makes while
  loading a batch that was prefetched but not consumed are already in the RNG snapshot
  and are made again on resume. Keep main-process loading free of global-RNG draws.
* Map-style with workers: transforms drawing from a worker's own RNG differ after a resume
  with ``k > 0`` (a worker's stream depends on the batches it loaded). Order and samples
  stay exact. Likewise with ``persistent_workers``.
* ``in_order=False`` with workers returns batches in a racy order: refused at install.
* Custom samplers must draw their randomness when their iteration starts (all torch and
  torchdata samplers do) or from their own ``generator`` attribute. Generators and
  ``epoch`` counters are found on every sampler reachable from the loader through
  ``.sampler`` / ``.batch_sampler`` attributes, at any depth (wrappers such as Accelerate's
  ``BatchSamplerShard`` nest the user's sampler).
"""

from __future__ import annotations

import copy
import functools
import itertools
import weakref
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset

from tracker_core._errors import ProgressStateError
from tracker_core.data._rng import (
    GlobalRng,
    capture_rng_state,
    preserved_global_rng,
    read_generator_state,
    read_torch_cpu_state,
    restore_rng_state,
)
from tracker_core.distributed._sharded import SHARDED_KEYS
from tracker_core.distributed._sharded import describe as describe_batch_sharding
from tracker_core.state._codec import (
    check_plain,
    from_plain,
    join_key,
    read_int,
    read_mapping,
    read_str,
    tensor_to_text,
    to_plain,
)

__all__ = ["LoaderKind", "LoaderPosition", "capture_rng_state", "restore_rng_state"]

LoaderKind = Literal["sampler_replay", "iterable_replay", "stateful_dataloader"]
STATE_VERSION = 1

_KINDS: tuple[str, ...] = get_args(LoaderKind)
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
# A DistributedSampler's settings, and the loader's per-rank batch size: what maps a position
# across world sizes (tracker_core/distributed/_elastic.py). A batch-sharded loader adds SHARDED_KEYS.
DISTRIBUTED_KEYS = ("num_replicas", "rank", "seed", "shuffle", "drop_last", "dataset_size", "batch_size")
# Settings that must not change between a save and its resume: the epoch order depends on them.
_SAME_ORDER_KEYS = ("seed", "shuffle", "dataset_size")
_EPOCH_KEYS: dict[str, tuple[str, ...]] = {
    "sampler_replay": ("iterator_rng", "loader_generator", "sampler_rng"),
    "iterable_replay": ("iterator_rng", "loader_generator"),
    "stateful_dataloader": ("iterator_rng", "loader_generator", "loader_state"),
}
# The attributes through which samplers hold the samplers they draw from.
_CHAIN = ("sampler", "batch_sampler")
_END = object()


@dataclass(frozen=True)
class _SamplerRng:
    """What an index sampler draws its order from when it starts."""

    torch_state: torch.Tensor
    generators: dict[str, torch.Tensor]
    epochs: dict[str, int]


@dataclass
class _EpochRecord:
    """What fixed one epoch's order; fields a kind does not use stay None."""

    iterator_rng: GlobalRng | None = None  # None when a persistent-worker iterator was reused
    loader_generator: torch.Tensor | None = None
    sampler_rng: _SamplerRng | None = None  # "sampler_replay"; None until the sampler starts
    loader_state: dict[str, Any] | None = None  # "stateful_dataloader", as plain data


@dataclass(frozen=True)
class _Replay:
    record: _EpochRecord
    skip: int


@dataclass(frozen=True)
class _ParsedState:
    skip: int
    generators: dict[str, torch.Tensor]
    record: _EpochRecord | None
    loader_state: dict[str, Any] | None  # decoded (tensors back), for StatefulDataLoader


class LoaderPosition:
    """Where a DataLoader is within its epochs, saved as plain data and restored exactly.

    Install before the loader is first iterated; the framework keeps the same object::

        position = LoaderPosition(loader)  # lives as long as the loader
        state = position.state_dict(batches_consumed=5)  # at a checkpoint
        # fresh process, same loader configuration:
        LoaderPosition(loader).load_state_dict(state)  # its next epoch starts at batch 5
    """

    def __init__(self, loader: DataLoader[Any]) -> None:
        """Hook ``loader`` in place (``loader._get_iterator``); iteration keeps its speed.

        Raises ``TypeError`` for a non-DataLoader and ``ValueError`` if the loader already
        has a position or uses ``in_order=False`` with workers.
        """
        if not isinstance(loader, DataLoader):
            raise TypeError(f"LoaderPosition needs a torch DataLoader, got {type(loader).__name__}")
        previous = loader.__dict__.get("_get_iterator")
        if isinstance(getattr(previous, "__self__", None), LoaderPosition):
            raise ValueError("this loader already has a LoaderPosition; keep using that one")
        if loader.num_workers > 0 and not getattr(loader, "in_order", True):
            raise ValueError("in_order=False with workers yields batches in a racy order; it cannot resume exactly")
        # The loader holds this position (through the hook below); the position holds the
        # loader weakly, so no reference cycle keeps a loader and its workers alive.
        self._loader_ref = weakref.ref(loader)
        self._kind: LoaderKind = _kind_of(loader)
        self._sampler = loader.sampler  # DataLoader forbids reassigning these two after init
        self._batch_sampler = loader.batch_sampler
        self._epoch: _EpochRecord | None = None  # the most recently begun epoch
        self._replay: _Replay | None = None  # armed by load_state_dict
        self._awaiting_sampler = False  # an iterator was built; its sampler has not started
        self._previous_hook: Any = previous  # an instance-level _get_iterator someone else set
        _forget_live_iterator(loader)
        loader._get_iterator = self._begin_iteration  # type: ignore[method-assign]

    @property
    def loader(self) -> DataLoader[Any]:
        """The hooked loader; ``RuntimeError`` if nothing else kept it alive."""
        loader = self._loader_ref()
        if loader is None:
            raise RuntimeError("the loader of this LoaderPosition was garbage-collected; keep a reference to it")
        return loader

    @property
    def kind(self) -> LoaderKind:
        """The resume mechanism: ``"sampler_replay"``, ``"iterable_replay"`` or ``"stateful_dataloader"``."""
        return self._kind

    # --- saving -------------------------------------------------------------------------

    def state_dict(self, *, batches_consumed: int) -> dict[str, Any]:
        """Plain data: what fixed the most recently begun epoch, plus ``batches_consumed``.

        ``batches_consumed`` counts that epoch's batches whose training steps completed;
        between epochs pass the finished epoch's length. Raises ``ValueError`` if it is
        negative, above an epoch's length, or nonzero before any batch was drawn.
        """
        if isinstance(batches_consumed, bool) or not isinstance(batches_consumed, int):
            raise TypeError(f"batches_consumed must be an int, got {type(batches_consumed).__name__}")
        if batches_consumed < 0:
            raise ValueError(f"batches_consumed must be >= 0, got {batches_consumed}")
        per_epoch = self._batches_per_epoch()
        if per_epoch is not None and batches_consumed > per_epoch:
            raise ValueError(f"batches_consumed={batches_consumed} exceeds the {per_epoch} batches of an epoch")
        record = self._epoch
        if batches_consumed and not self._has_drawn(record):
            raise ValueError("no batch of an epoch has been drawn yet, so batches_consumed must be 0")
        return {
            "version": STATE_VERSION,
            "kind": self._kind,
            "batches_consumed": batches_consumed,
            "batches_per_epoch": per_epoch,
            "num_workers": self.loader.num_workers,
            "generators": {path: tensor_to_text(g.get_state()) for path, g in self._generators().items()},
            "epoch": None if record is None else self._record_to_plain(record),
            "distributed": self.distributed_info(),
        }

    def distributed_info(self) -> dict[str, Any] | None:
        """The DistributedSampler in the sampler chain (``DISTRIBUTED_KEYS``); without exactly one, the
        loader's batch sharding over a seedable sampler (``tracker_core/distributed/_sharded.py``), or None."""
        found = [s for s in self._samplers().values() if isinstance(s, DistributedSampler)]
        if len(found) != 1:
            return describe_batch_sharding(self._samplers())
        sampler = found[0]
        return {
            "num_replicas": int(sampler.num_replicas),
            "rank": int(sampler.rank),
            "seed": int(sampler.seed),
            "shuffle": bool(sampler.shuffle),
            "drop_last": bool(sampler.drop_last),
            "dataset_size": len(sampler.dataset),  # type: ignore[arg-type]
            "batch_size": self.loader.batch_size,
        }

    def _record_to_plain(self, record: _EpochRecord) -> dict[str, Any]:
        plain: dict[str, Any] = {
            "iterator_rng": None if record.iterator_rng is None else record.iterator_rng.to_plain(),
            "loader_generator": None if record.loader_generator is None else tensor_to_text(record.loader_generator),
        }
        if self._kind == "sampler_replay":
            rng = record.sampler_rng
            plain["sampler_rng"] = None
            if rng is not None:
                plain["sampler_rng"] = {
                    "torch": tensor_to_text(rng.torch_state),
                    "generators": {path: tensor_to_text(s) for path, s in rng.generators.items()},
                    "epochs": dict(rng.epochs),
                }
        if self._kind == "stateful_dataloader":
            plain["loader_state"] = copy.deepcopy(record.loader_state)
        return plain

    # --- loading ------------------------------------------------------------------------

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Validate ``state`` fully, then arm the next epoch iteration to resume in it.

        The next ``iter(loader)`` replays the saved epoch's order without its first
        ``batches_consumed`` batches; later epochs follow as in the uninterrupted run.
        Sampler generators are restored at once. On a bad state raises
        ``ProgressStateError`` (key path and problem) and changes nothing.
        """
        self._apply(self._parse(state))

    def _apply(self, parsed: _ParsedState) -> None:
        """Arm a state that ``_parse`` accepted; cannot fail."""
        generators = self._generators()
        for path, saved in parsed.generators.items():
            generators[path].set_state(saved)
        self._epoch = parsed.record
        self._replay = None if parsed.record is None else _Replay(parsed.record, parsed.skip)
        self._awaiting_sampler = False
        if parsed.loader_state is not None:
            self.loader.load_state_dict(parsed.loader_state)  # type: ignore[attr-defined]
        else:
            _forget_live_iterator(self.loader)

    def _parse(self, state: object) -> _ParsedState:
        if not isinstance(state, Mapping):
            raise ProgressStateError("", f"expected a mapping, got {type(state).__name__}")
        if "kind" not in state:
            raise ProgressStateError("kind", "missing")
        kind = read_str(state["kind"], "kind")
        if kind not in _KINDS:
            raise ProgressStateError("kind", f"unknown kind {kind!r}; expected one of {list(_KINDS)}")
        if kind != self._kind:
            raise ProgressStateError("kind", f"saved from a {kind!r} loader; this loader resumes by {self._kind!r}")
        fields = read_mapping(state, "", required=_STATE_KEYS)
        version = read_int(fields["version"], "version")
        if version != STATE_VERSION:
            raise ProgressStateError("version", f"unsupported version {version}; this code reads {STATE_VERSION}")
        skip = read_int(fields["batches_consumed"], "batches_consumed", minimum=0)
        per_epoch = fields["batches_per_epoch"]
        if per_epoch is not None:
            per_epoch = read_int(per_epoch, "batches_per_epoch", minimum=0)
            mine = self._batches_per_epoch()
            if mine is not None and mine != per_epoch:
                raise ProgressStateError(
                    "batches_per_epoch", f"saved with {per_epoch} batches per epoch; this loader has {mine}"
                )
            if skip > per_epoch:
                raise ProgressStateError("batches_consumed", f"{skip} exceeds the {per_epoch} batches of an epoch")
        workers = read_int(fields["num_workers"], "num_workers", minimum=0)
        if self._kind != "sampler_replay" and workers != self.loader.num_workers:
            mine = self.loader.num_workers
            raise ProgressStateError(
                "num_workers", f"saved with {workers} workers; this loader has {mine}, and its order depends on it"
            )
        self._check_distributed(fields["distributed"], "distributed")
        generators = self._read_generators(fields["generators"], "generators")
        record = None if fields["epoch"] is None else self._read_record(fields["epoch"], "epoch")
        if skip and not self._has_drawn(record):
            raise ProgressStateError(
                "batches_consumed", f"must be 0 in a state saved before any batch was drawn, got {skip}"
            )
        loader_state = None
        if record is not None and record.loader_state is not None:
            loader_state = from_plain(record.loader_state, "epoch.loader_state")
        return _ParsedState(skip, generators, record, loader_state)

    def _check_distributed(self, value: object, key: str) -> None:
        """A saved sharding (DistributedSampler or batch shards) must match this loader's (when both have one)."""
        saved = read_distributed(value, key)
        mine = self.distributed_info()
        if saved is None or mine is None:
            return
        for name in _SAME_ORDER_KEYS:
            if saved[name] != mine[name]:
                raise ProgressStateError(
                    join_key(key, name),
                    f"saved with {name}={saved[name]!r}; this loader's sampler has {mine[name]!r}, "
                    "so the epoch's order differs",
                )
        for name in ("num_replicas", "rank"):
            if saved[name] != mine[name]:
                raise ProgressStateError(
                    join_key(key, name),
                    f"saved by rank {saved['rank']} of {saved['num_replicas']}; this loader is rank "
                    f"{mine['rank']} of {mine['num_replicas']} (save with Tracker.gathered_state_dict() "
                    "to resume every rank, or at another world size)",
                )

    def _read_record(self, value: object, key: str) -> _EpochRecord:
        fields = read_mapping(value, key, required=_EPOCH_KEYS[self._kind])
        record = _EpochRecord()
        if fields["iterator_rng"] is not None:
            record.iterator_rng = GlobalRng.from_plain(fields["iterator_rng"], join_key(key, "iterator_rng"))
        if fields["loader_generator"] is not None:
            generator = self.loader.generator
            if generator is None:
                raise ProgressStateError(join_key(key, "loader_generator"), "this loader has no generator")
            record.loader_generator = read_generator_state(
                fields["loader_generator"], join_key(key, "loader_generator"), generator
            )
        if self._kind == "sampler_replay" and fields["sampler_rng"] is not None:
            record.sampler_rng = self._read_sampler_rng(fields["sampler_rng"], join_key(key, "sampler_rng"))
        if self._kind == "stateful_dataloader":
            loader_state = fields["loader_state"]
            if not isinstance(loader_state, Mapping):
                raise ProgressStateError(
                    join_key(key, "loader_state"), f"expected a mapping, got {type(loader_state).__name__}"
                )
            check_plain(loader_state, join_key(key, "loader_state"))  # bounded before deepcopy recurses
            record.loader_state = copy.deepcopy(dict(loader_state))
        return record

    def _read_sampler_rng(self, value: object, key: str) -> _SamplerRng:
        fields = read_mapping(value, key, required=("torch", "generators", "epochs"))
        torch_state = read_torch_cpu_state(fields["torch"], join_key(key, "torch"))
        generators = self._read_generators(fields["generators"], join_key(key, "generators"))
        owners = self._epoch_owners()
        epochs_key = join_key(key, "epochs")
        saved_epochs = read_mapping(fields["epochs"], epochs_key, required=tuple(owners))
        epochs = {path: read_int(saved_epochs[path], join_key(epochs_key, path), minimum=0) for path in owners}
        return _SamplerRng(torch_state, generators, epochs)

    def _read_generators(self, value: object, key: str) -> dict[str, torch.Tensor]:
        mine = self._generators()
        fields = read_mapping(value, key, required=tuple(mine))
        return {path: read_generator_state(fields[path], join_key(key, path), g) for path, g in mine.items()}

    # --- the hook -----------------------------------------------------------------------

    def _begin_iteration(self) -> Any:
        """Stands in for ``loader._get_iterator``: note (or replay) what fixes this epoch."""
        if self._replay is not None:
            return self._replay_epoch(self._replay)
        record = _EpochRecord(GlobalRng.capture(), _state_of(self.loader.generator))
        self._epoch = record
        self._awaiting_sampler = True
        iterator = self._build_iterator()
        if self._kind == "stateful_dataloader":
            record.loader_state = to_plain(iterator.state_dict(), "loader_state")
            self._watch_resets(iterator)
        return iterator

    def _replay_epoch(self, replay: _Replay) -> Any:
        record = replay.record
        self._epoch = record
        loader = self.loader
        with preserved_global_rng():
            if record.iterator_rng is not None:
                record.iterator_rng.apply()
                if record.loader_generator is not None and loader.generator is not None:
                    loader.generator.set_state(record.loader_generator)
            if self._kind == "sampler_replay":
                # Stays armed: the index sampler replays and skips when it starts.
                self._awaiting_sampler = True
                return self._build_iterator()
            self._replay = None
            iterator = self._build_iterator()
            for done in range(replay.skip):
                try:
                    next(iterator)
                except StopIteration:
                    raise ProgressStateError(
                        "batches_consumed",
                        f"the loader ended after {done} of the {replay.skip} consumed batches; "
                        "its data differ from the checkpointed run",
                    ) from None
        if self._kind == "stateful_dataloader":
            self._watch_resets(iterator)
        return iterator

    def _build(self, loader: DataLoader[Any]) -> Any:
        """Build an iterator as the loader would without this position."""
        if self._previous_hook is not None:
            return self._previous_hook()
        return type(loader)._get_iterator(loader)

    def _build_iterator(self) -> Any:
        loader = self.loader
        if self._kind != "sampler_replay":
            return self._build(loader)
        name = "batch_sampler" if loader.batch_sampler is not None else "sampler"
        inner = getattr(loader, name)
        # DataLoader.__setattr__ refuses these names after init; the tap is visible only
        # while the iterator is built, and the iterator keeps it as its index sampler.
        object.__setattr__(loader, name, _SamplerTap(inner, self))
        try:
            iterator = self._build(loader)
        finally:
            object.__setattr__(loader, name, inner)
        indices = getattr(iterator, "_sampler_iter", None)
        if type(indices) is _EpochIndices:
            indices.owner = weakref.ref(iterator)
        return iterator

    def _start_sampler(self, inner: Iterable[Any]) -> Iterator[Any]:
        """An epoch's index sampler starts: replay its noted RNG and skip, or note it."""
        replay, self._replay = self._replay, None
        if replay is not None:
            self._epoch = replay.record
        elif not self._awaiting_sampler or self._epoch is None:
            self._epoch = _EpochRecord()  # a reused persistent-worker iterator began an epoch
        self._awaiting_sampler = False
        if replay is not None and replay.record.sampler_rng is not None:
            with preserved_global_rng():
                self._apply_sampler_rng(replay.record.sampler_rng)
                indices = iter(inner)
                for _ in itertools.islice(indices, replay.skip):
                    pass
                # Samplers draw lazily (RandomSampler seeds itself on its first next), so
                # take the first kept batch here, inside the replayed RNG state.
                first = next(indices, _END)
            return iter(()) if first is _END else itertools.chain((first,), indices)
        self._epoch.sampler_rng = _SamplerRng(
            torch.get_rng_state(),
            {path: g.get_state() for path, g in self._generators().items()},
            {path: owner.epoch for path, owner in self._epoch_owners().items()},
        )
        return iter(inner)

    def _apply_sampler_rng(self, rng: _SamplerRng) -> None:
        torch.set_rng_state(rng.torch_state)
        generators = self._generators()
        for path, saved in rng.generators.items():
            generators[path].set_state(saved)
        owners = self._epoch_owners()
        for path, epoch in rng.epochs.items():
            owners[path].epoch = epoch

    def _watch_resets(self, iterator: Any) -> None:
        """A StatefulDataLoader reusing persistent workers begins an epoch in ``_reset``."""
        loader = self.loader
        if not (loader.persistent_workers and loader.num_workers > 0):
            return
        reset = type(iterator)._reset
        iterator_ref = weakref.ref(iterator)  # the iterator holds this closure

        def reset_and_note(*args: Any, **kwargs: Any) -> None:
            live = iterator_ref()
            reset(live, *args, **kwargs)
            self._epoch = _EpochRecord(loader_state=to_plain(live.state_dict(), "loader_state"))

        iterator._reset = reset_and_note

    # --- what fixes the order -----------------------------------------------------------

    def _samplers(self) -> dict[str, Any]:
        """Every sampler the loader reaches through ``.sampler`` / ``.batch_sampler``, by path, each once.

        Wrappers nest the user's sampler at any depth (Accelerate's ``BatchSamplerShard``
        holds the user's ``BatchSampler`` as ``.batch_sampler``, which holds its sampler), so
        the chain is walked, breadth first; an object met again (e.g. the ``BatchSampler``'s
        sampler is ``loader.sampler``) keeps its first, shortest path.
        """
        found: dict[str, Any] = {}
        seen: set[int] = set()
        queue = [("sampler", self._sampler), ("batch_sampler", self._batch_sampler)]
        while queue:
            path, obj = queue.pop(0)
            if obj is None or id(obj) in seen:
                continue
            seen.add(id(obj))
            found[path] = obj
            queue.extend((f"{path}.{name}", getattr(obj, name, None)) for name in _CHAIN)
        return found

    def _generators(self) -> dict[str, torch.Generator]:
        """The order-fixing generators by path, each once, e.g. ``{"sampler.generator": g}``."""
        found: dict[str, torch.Generator] = {}
        candidates = [("generator", self.loader.generator)]
        candidates += [(f"{path}.generator", getattr(s, "generator", None)) for path, s in self._samplers().items()]
        for path, generator in candidates:
            if isinstance(generator, torch.Generator) and all(generator is not g for g in found.values()):
                found[path] = generator
        return found

    def _epoch_owners(self) -> dict[str, Any]:
        """Samplers with an int ``epoch`` (DistributedSampler) by path, e.g. ``{"sampler.epoch": s}``."""
        owners = {}
        for path, sampler in self._samplers().items():
            epoch = getattr(sampler, "epoch", None)
            if isinstance(epoch, int) and not isinstance(epoch, bool):
                owners[f"{path}.epoch"] = sampler
        return owners

    def _batches_per_epoch(self) -> int | None:
        if isinstance(self.loader.dataset, IterableDataset):
            return None  # len() of an iterable loader is a hint, and calling it arms a warning
        try:
            return len(self.loader)
        except TypeError:
            return None

    def _has_drawn(self, record: _EpochRecord | None) -> bool:
        """Whether ``record`` knows the order of batches already drawn."""
        if record is None:
            return False
        return self._kind != "sampler_replay" or record.sampler_rng is not None


def read_distributed(value: object, key: str) -> dict[str, Any] | None:
    """A saved ``distributed`` field: None or the ``DISTRIBUTED_KEYS`` (and ``SHARDED_KEYS`` of a
    batch-sharded loader) with their types checked."""
    if value is None:
        return None
    fields = read_mapping(value, key, required=DISTRIBUTED_KEYS, optional=SHARDED_KEYS)
    out: dict[str, Any] = {}
    for name in ("num_replicas", "rank", "seed", "dataset_size"):
        out[name] = read_int(fields[name], join_key(key, name), minimum=0)
    for name in ("shuffle", "drop_last"):
        if not isinstance(fields[name], bool):
            raise ProgressStateError(join_key(key, name), f"expected a bool, got {type(fields[name]).__name__}")
        out[name] = fields[name]
    batch_size = fields["batch_size"]
    out["batch_size"] = None if batch_size is None else read_int(batch_size, join_key(key, "batch_size"), minimum=1)
    if any(name in fields for name in SHARDED_KEYS):
        read_mapping(fields, key, required=(*DISTRIBUTED_KEYS, *SHARDED_KEYS))  # both or neither
        if fields["shards"] != "batches":
            raise ProgressStateError(join_key(key, "shards"), f"expected 'batches', got {fields['shards']!r}")
        if not isinstance(fields["even_batches"], bool):
            raise ProgressStateError(join_key(key, "even_batches"), f"expected a bool, got {fields['even_batches']!r}")
        out.update(shards="batches", even_batches=fields["even_batches"])
    return out


class _SamplerTap:
    """The index sampler an iterator sees: ``iter()`` gives one epoch's noted indices."""

    __slots__ = ("_inner", "_position")

    def __init__(self, inner: Iterable[Any], position: LoaderPosition) -> None:
        self._inner = inner
        self._position = position

    def __iter__(self) -> _EpochIndices:
        return _EpochIndices(self._inner, self._position)

    def __len__(self) -> int:
        return len(self._inner)  # type: ignore[arg-type]


class _EpochIndices:
    """One epoch's indices; the first ``next`` lets the position note or replay the start.

    ``owner`` is the (weakly held) DataLoader iterator asking for them, when known: after
    the first ``next`` it is handed the sampler's own indices, so later batches cost
    nothing here (torch's single-process iterator reads ``_sampler_iter`` on every batch).
    """

    __slots__ = ("_indices", "_inner", "_position", "owner")

    def __init__(self, inner: Iterable[Any], position: LoaderPosition) -> None:
        self._inner = inner
        self._position = position
        self._indices: Iterator[Any] | None = None
        self.owner: weakref.ref[Any] | None = None

    def __iter__(self) -> _EpochIndices:
        return self

    def __next__(self) -> Any:
        indices = self._indices
        if indices is None:
            indices = self._indices = self._position._start_sampler(self._inner)
            owner = None if self.owner is None else self.owner()
            if owner is not None and getattr(owner, "_sampler_iter", None) is self:
                owner._sampler_iter = indices
        return next(indices)


def _state_of(generator: torch.Generator | None) -> torch.Tensor | None:
    return None if generator is None else generator.get_state()


@functools.cache
def _stateful_loader_type() -> type | None:
    try:
        from torchdata.stateful_dataloader import StatefulDataLoader
    except ImportError:  # pragma: no cover - torchdata is optional
        return None
    return StatefulDataLoader


def _kind_of(loader: DataLoader[Any]) -> LoaderKind:
    stateful = _stateful_loader_type()
    if stateful is not None and isinstance(loader, stateful):
        return "stateful_dataloader"
    if isinstance(loader.dataset, IterableDataset):
        return "iterable_replay"
    return "sampler_replay"


def _forget_live_iterator(loader: DataLoader[Any]) -> None:
    """Drop a kept iterator (persistent workers) so the next epoch is built, and seen, anew."""
    stateful = _stateful_loader_type()
    if stateful is not None and isinstance(loader, stateful):
        loader.load_state_dict({})  # drops its iterator; keeps a pending state of its own
    else:
        loader._iterator = None
