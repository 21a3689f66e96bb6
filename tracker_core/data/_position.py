"""Make a DataLoader resumable at a batch position, in place ("data position is progress").

``LoaderPosition(loader)`` hooks the very loader object a framework holds. Whenever an
epoch's iteration begins it notes what fixes that epoch's order. At checkpoint time
``state_dict(batches_consumed=k)`` saves that note plus ``k``, taken from the progress
counters (frameworks prefetch, so the loader may have yielded more than ``k``). In a fresh
process ``load_state_dict(state)`` on an identically configured loader makes its next
epoch yield exactly batches ``k, k+1, ...`` of the saved epoch, and every later epoch as in
the uninterrupted run. Restore the global RNGs with ``restore_rng_state`` as well.

This front keeps the state common to every loader; one strategy per loader kind, named by
the state's ``kind``, notes and replays an epoch:

* ``"sampler_replay"`` (``_sampler_replay.py``): torch ``DataLoader`` over a map-style
  dataset; skips at the index sampler, so skipped samples are never loaded.
* ``"iterable_replay"`` (``_iterable_replay.py``): torch ``DataLoader`` over an
  ``IterableDataset``; positions a dataset with its own state (no worker), else reads and
  drops the consumed batches.
* ``"own_state"`` (``_own_state.py``): a loader with its own public state (torchdata
  ``StatefulDataLoader``); that state positions it, saved and loaded back by the position or,
  with ``saves_own_state=False``, by the framework (Lightning, Accelerate).

Where batches are read again, a :class:`SlowResumeWarning` says so before, and the time it
took is kept (``fast_forward``) and saved with the next checkpoint. Every replay runs inside
a save/restore of the global RNGs, so the stream the caller restored from its checkpoint
continues undisturbed. Every private torch attribute touched is in ``_torch_compat.py``.

What cannot be exact:

* ``IterableDataset``: exact only if the iterable yields the same sequence in an epoch
  given the loader's seeds (randomness drawn in workers, or when ``iter(dataset)`` runs,
  is replayed), or puts itself back by its own state. Fewer batches than ``k`` on resume
  raise ``ProgressStateError``.
* ``num_workers=0`` with a prefetching framework: random draws the dataset makes while
  loading a batch that was prefetched but not consumed are already in the RNG snapshot
  and are made again on resume. Keep main-process loading free of global-RNG draws.
* With workers, a map-style dataset (DataLoader or StatefulDataLoader) or an iterable
  positioned by its own state: transforms drawing from a worker's own RNG differ after a
  resume with ``k > 0`` (a worker's stream depends on the batches it loaded). Order and
  samples stay exact. Likewise with ``persistent_workers``.
* ``in_order=False`` with workers returns batches in a racy order: refused at install.
* A loader with its own state (``"own_state"``) gets torchdata's limits as they are: its
  state is saved as the checkpoint finds it (exact without prefetch; a prefetching framework
  restores it itself); an iterable without a state of its own is read again
  (``SlowResumeWarning``); at 0 workers an order drawn by torch's own ``RandomSampler`` (no
  state of its own) is drawn again at the first resumed batch, from the restored global RNG
  (``InexactResumeWarning``). Lightning saves the state of such a loader without a length after
  the batch it prefetched: the resumed epoch skips it (warned by the Lightning adapter).
* Custom samplers must draw their randomness when their iteration starts (all torch and
  torchdata samplers do) or from their own ``generator`` attribute. Generators and
  ``epoch`` counters are found on every sampler reachable from the loader through
  ``.sampler`` / ``.batch_sampler`` attributes, at any depth (wrappers such as Accelerate's
  ``BatchSamplerShard`` nest the user's sampler).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, get_args

import torch
from torch.utils.data import DataLoader, IterableDataset

from tracker_core._errors import ProgressStateError
from tracker_core.data._compact import compact_loader, expand_loader
from tracker_core.data._epoch import EpochRecord, FastForward, Replay, Site
from tracker_core.data._fast_forward import SlowResumeWarning
from tracker_core.data._iterable_replay import IterableReplay
from tracker_core.data._own_state import OwnState
from tracker_core.data._rng import (
    GlobalRng,
    capture_global_rng,
    capture_rng_state,
    read_generator_state,
    restore_global_rng,
    restore_rng_state,
)
from tracker_core.data._sampler_replay import SamplerReplay
from tracker_core.data._samplers import DISTRIBUTED_KEYS, read_distributed
from tracker_core.data._strategy import LoaderKind, Strategy, is_stateful
from tracker_core.data._torch_compat import install_iterator_hook, iterator_hook
from tracker_core.state._codec import tensor_to_text
from tracker_core.state._readers import is_mapping, join_key, read_int, read_mapping, read_str, shown

__all__ = [
    "DISTRIBUTED_KEYS",
    "FastForward",
    "LoaderKind",
    "LoaderPosition",
    "SlowResumeWarning",
    "capture_rng_state",
    "read_distributed",
    "restore_rng_state",
]

STATE_VERSION = 1  # the form readers check; saved as version 2 (``_compact.py``), which expands to it

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
_STRATEGIES: tuple[type[Strategy], ...] = (SamplerReplay, IterableReplay, OwnState)
_KINDS: tuple[str, ...] = get_args(LoaderKind)
# The saved epoch record's keys per kind, required and optional.
_EPOCH_KEYS = {strategy.kind: strategy.epoch_keys for strategy in _STRATEGIES}
_OPTIONAL_EPOCH_KEYS = {strategy.kind: strategy.optional_epoch_keys for strategy in _STRATEGIES}
# Settings that must not change between a save and its resume: the epoch order depends on them.
_SAME_ORDER_KEYS = ("seed", "shuffle", "dataset_size")
OLD_STATEFUL = (
    "'stateful_dataloader' is the kind of an earlier development version, which rewrote torchdata's private "
    "state; a StatefulDataLoader is now positioned by its own public state (kind 'own_state'), and that saved "
    "state cannot be read: resume from a checkpoint saved by this version, or restart the epoch"
)


@dataclass(frozen=True)
class _ParsedState:
    skip: int
    generators: dict[str, tuple[torch.Generator, torch.Tensor]]  # the loader's generators and their saved states
    record: EpochRecord | None
    loader_state: Any  # what the strategy hands the loader when armed, or None


class LoaderPosition:
    """Where a DataLoader is within its epochs, saved as plain data and restored exactly.

    Install before the loader is first iterated; the framework keeps the same object::

        position = LoaderPosition(loader)  # lives as long as the loader
        state = position.state_dict(batches_consumed=5)  # at a checkpoint
        # fresh process, same loader configuration:
        LoaderPosition(loader).load_state_dict(state)  # its next epoch starts at batch 5
    """

    def __init__(self, loader: DataLoader[Any]) -> None:
        """Hook ``loader`` in place (its iterator hook); iteration keeps its speed.

        Raises ``TypeError`` for a non-DataLoader and ``ValueError`` if the loader already
        has a position or uses ``in_order=False`` with workers.
        """
        if not isinstance(loader, DataLoader):
            raise TypeError(f"LoaderPosition needs a torch DataLoader, got {type(loader).__name__}")
        if LoaderPosition.of(loader) is not None:
            raise ValueError("this loader already has a LoaderPosition; keep using that one")
        if loader.num_workers > 0 and not getattr(loader, "in_order", True):
            raise ValueError("in_order=False with workers yields batches in a racy order; it cannot resume exactly")
        self._site = Site(loader, iterator_hook(loader))
        self._strategy = _strategy_for(loader)(self._site)
        self._strategy.drop_iterator()
        install_iterator_hook(loader, self._begin_iteration)

    @classmethod
    def of(cls, loader: DataLoader[Any]) -> LoaderPosition | None:
        """The position installed on ``loader``, or None."""
        owner = getattr(iterator_hook(loader), "__self__", None)
        return owner if isinstance(owner, LoaderPosition) else None

    @property
    def loader(self) -> DataLoader[Any]:
        """The hooked loader; ``RuntimeError`` if nothing else kept it alive."""
        return self._site.loader

    def holds(self, loader: object) -> bool:
        """Whether this position is the one of ``loader``."""
        return self._site.loader_or_none() is loader

    @property
    def kind(self) -> LoaderKind:
        """The resume mechanism: ``"sampler_replay"``, ``"iterable_replay"`` or ``"own_state"``."""
        return self._strategy.kind

    @property
    def saves_own_state(self) -> bool:
        """Whether a loader with its own state (kind ``"own_state"``) has it saved and loaded back by this position
        (True, the default) or by the framework, which restores it itself (False: Lightning, Accelerate)."""
        return isinstance(self._strategy, OwnState) and self._strategy.saves_state

    @saves_own_state.setter
    def saves_own_state(self, saves: bool) -> None:
        if isinstance(self._strategy, OwnState):
            self._strategy.saves_state = saves

    @property
    def fast_forward(self) -> FastForward | None:
        """The last resume's reading of already-trained batches (how many, seconds), or None if it read none."""
        return self._site.cursor.fast_forward

    def report_fast_forwards(self, record: Callable[[float], None]) -> None:
        """Call ``record(seconds)`` after each resume that reads already-trained batches again
        (a tracker records them in its progress). Not kept by a copy of the loader."""
        self._site.cursor.on_fast_forward = record

    # --- saving -------------------------------------------------------------------------

    def state_dict(self, *, batches_consumed: int) -> dict[str, Any]:
        """Plain data: what fixed the most recently begun epoch, plus ``batches_consumed``.

        ``batches_consumed`` counts that epoch's batches whose training steps completed;
        between epochs pass the finished epoch's length. Raises ``ValueError`` if it is
        negative, above an epoch's length, or nonzero before any batch was drawn.
        """
        return compact_loader(self._plain_state_dict(batches_consumed))

    def _plain_state_dict(self, batches_consumed: int) -> dict[str, Any]:
        """:meth:`state_dict` in version 1 (plain base64 blobs), before ``tracker_core/data/_compact.py``."""
        if isinstance(batches_consumed, bool) or not isinstance(batches_consumed, int):
            raise TypeError(f"batches_consumed must be an int, got {type(batches_consumed).__name__}")
        if batches_consumed < 0:
            raise ValueError(f"batches_consumed must be >= 0, got {batches_consumed}")
        per_epoch = self._batches_per_epoch()
        if per_epoch is not None and batches_consumed > per_epoch:
            raise ValueError(f"batches_consumed={batches_consumed} exceeds the {per_epoch} batches of an epoch")
        record = self._site.cursor.epoch
        if batches_consumed and not self._strategy.has_drawn(record):
            raise ValueError("no batch of an epoch has been drawn yet, so batches_consumed must be 0")
        loader = self.loader
        state = {
            "version": STATE_VERSION,
            "kind": self.kind,
            "batches_consumed": batches_consumed,
            "batches_per_epoch": per_epoch,
            "num_workers": loader.num_workers,
            "generators": {path: tensor_to_text(g.get_state()) for path, g in self._generators().items()},
            "epoch": None if record is None else self._record_to_plain(record, batches_consumed),
            "distributed": self.distributed_info(),
        }
        fast_forward = self._site.cursor.fast_forward
        if fast_forward is not None:
            state["fast_forward"] = fast_forward.to_plain()
        return state

    def distributed_info(self) -> dict[str, Any] | None:
        """The DistributedSampler in the sampler chain (``DISTRIBUTED_KEYS``); without exactly one, the
        loader's batch sharding over a seedable sampler (``tracker_core/distributed/_sharded.py``), or None."""
        return self._site.chain.distributed_info(self.loader.batch_size)

    def _record_to_plain(self, record: EpochRecord, batches_consumed: int) -> dict[str, Any]:
        return {
            "iterator_rng": None if record.iterator_rng is None else record.iterator_rng.to_plain(),
            "loader_generator": None if record.loader_generator is None else tensor_to_text(record.loader_generator),
            **self._strategy.epoch_to_plain(record, batches_consumed),
        }

    # --- loading ------------------------------------------------------------------------

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Validate ``state`` fully, then arm the next epoch iteration to resume in it.

        The next ``iter(loader)`` replays the saved epoch's order without its first
        ``batches_consumed`` batches; later epochs follow as in the uninterrupted run.
        Sampler generators are restored at once. On a bad state raises
        ``ProgressStateError`` (key path and problem) and changes nothing.
        """
        self._apply(self._parse(state))

    def forget_replay(self) -> None:
        """A loaded state is not resumed after all: the next epoch is read whole."""
        self._strategy.disarm()

    def _apply(self, parsed: _ParsedState) -> None:
        """Arm a state that ``_parse`` accepted; cannot fail."""
        for generator, saved in parsed.generators.values():
            generator.set_state(saved)
        cursor = self._site.cursor
        cursor.epoch = parsed.record
        cursor.replay = None if parsed.record is None else Replay(parsed.record, parsed.skip)
        cursor.awaiting_sampler = False
        self._strategy.arm(parsed.loader_state)

    def _parse(self, state: object, rng: Mapping[str, Any] | None = None) -> _ParsedState:
        """``rng``: the version 1 global snapshot saved beside ``state`` (its ``iterator_rng`` may refer to it)."""
        state = expand_loader(state, "", rng, decoded=True)
        if not is_mapping(state):
            raise ProgressStateError("", f"expected a mapping, got {type(state).__name__}")
        if "kind" not in state:
            raise ProgressStateError("kind", "missing")
        kind = read_str(state["kind"], "kind")
        if kind == "stateful_dataloader":
            raise ProgressStateError("kind", OLD_STATEFUL)
        if kind not in _KINDS:
            raise ProgressStateError("kind", f"unknown kind {shown(kind)}; expected one of {list(_KINDS)}")
        if kind != self.kind:
            raise ProgressStateError("kind", f"saved from a {kind!r} loader; this loader resumes by {self.kind!r}")
        fields = read_mapping(state, "", required=_STATE_KEYS, optional=_OPTIONAL_STATE_KEYS)
        version = read_int(fields["version"], "version")
        if version != STATE_VERSION:
            raise ProgressStateError("version", f"unsupported version {version}; this code reads 1 and 2")
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
        if self._strategy.order_depends_on_workers and workers != self.loader.num_workers:
            mine = self.loader.num_workers
            raise ProgressStateError(
                "num_workers", f"saved with {workers} workers; this loader has {mine}, and its order depends on it"
            )
        samplers = self._site.chain.samplers()  # walked once for the checks below
        self._check_distributed(fields["distributed"], "distributed", samplers)
        if "fast_forward" in fields:
            _read_fast_forward(fields["fast_forward"], "fast_forward")
        generators = self._read_generators(fields["generators"], "generators", samplers)
        record, loader_state = None, None
        if fields["epoch"] is not None:
            record, loader_state = self._read_record(fields["epoch"], "epoch", skip)
        if skip and not self._strategy.has_drawn(record):
            raise ProgressStateError(
                "batches_consumed", f"must be 0 in a state saved before any batch was drawn, got {skip}"
            )
        return _ParsedState(skip, generators, record, loader_state)

    def _check_distributed(self, value: object, key: str, samplers: dict[str, Any]) -> None:
        """A saved sharding (DistributedSampler or batch shards) must match this loader's (when both have one)."""
        saved = read_distributed(value, key)
        if saved is None:
            return
        mine = self._site.chain.distributed_info(self.loader.batch_size, samplers)
        if mine is None:
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

    def _read_record(self, value: object, key: str, skip: int) -> tuple[EpochRecord, Any]:
        strategy = self._strategy
        fields = read_mapping(value, key, required=strategy.epoch_keys, optional=strategy.optional_epoch_keys)
        record = EpochRecord()
        if fields["iterator_rng"] is not None:
            record.iterator_rng = GlobalRng.from_plain(fields["iterator_rng"], join_key(key, "iterator_rng"))
        if fields["loader_generator"] is not None:
            generator = self.loader.generator
            if generator is None:
                raise ProgressStateError(join_key(key, "loader_generator"), "this loader has no generator")
            record.loader_generator = read_generator_state(
                fields["loader_generator"], join_key(key, "loader_generator"), generator
            )
        return record, strategy.read_epoch(fields, key, record, skip)

    def _read_generators(
        self, value: object, key: str, samplers: dict[str, Any]
    ) -> dict[str, tuple[torch.Generator, torch.Tensor]]:
        mine = self._site.chain.generators(self.loader.generator, samplers)
        fields = read_mapping(value, key, required=tuple(mine))
        return {path: (g, read_generator_state(fields[path], join_key(key, path), g)) for path, g in mine.items()}

    # --- the hook -----------------------------------------------------------------------

    def _begin_iteration(self) -> Any:
        """Stands in for the loader's ``_get_iterator``: note (or replay) what fixes this epoch."""
        cursor = self._site.cursor
        replay = cursor.replay
        if replay is not None:
            return self._replay_epoch(replay)
        record = EpochRecord(GlobalRng.capture(), _state_of(self.loader.generator))
        cursor.epoch = record
        return self._strategy.begin(record)

    def _replay_epoch(self, replay: Replay) -> Any:
        record = replay.record
        self._site.cursor.epoch = record
        loader = self.loader
        torch_only = not self._strategy.replays_all_global_rngs(replay)
        saved = capture_global_rng(torch_only=torch_only)
        try:
            if record.iterator_rng is not None:
                record.iterator_rng.apply(torch_only=torch_only)
                if record.loader_generator is not None and loader.generator is not None:
                    loader.generator.set_state(record.loader_generator)
            return self._strategy.replay(replay)
        finally:
            restore_global_rng(saved)

    # --- what fixes the order -----------------------------------------------------------

    def _generators(self) -> dict[str, torch.Generator]:
        return self._site.chain.generators(self.loader.generator)

    def _batches_per_epoch(self) -> int | None:
        if isinstance(self.loader.dataset, IterableDataset):
            return None  # len() of an iterable loader is a hint, and calling it arms a warning
        try:
            return len(self.loader)
        except TypeError:
            return None


def _strategy_for(loader: DataLoader[Any]) -> type[Strategy]:
    if is_stateful(loader):
        return OwnState
    if isinstance(loader.dataset, IterableDataset):
        return IterableReplay
    return SamplerReplay


def _read_fast_forward(value: object, key: str) -> FastForward:
    fields = read_mapping(value, key, required=("batches", "seconds"))
    seconds = fields["seconds"]
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
        raise ProgressStateError(join_key(key, "seconds"), f"expected a number >= 0, got {shown(seconds)}")
    return FastForward(read_int(fields["batches"], join_key(key, "batches"), minimum=1), float(seconds))


def _state_of(generator: torch.Generator | None) -> torch.Tensor | None:
    return None if generator is None else generator.get_state()
