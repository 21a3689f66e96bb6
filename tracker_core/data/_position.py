"""Where a train DataLoader is ("data position is progress"): a loader with its own state is positioned at its batch
(``_own_state.py``), a plain one between epochs only (``_plain.py``; docs/resume.md, "How the train loader gets back
to its batch")."""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from tracker_core._errors import ProgressStateError
from tracker_core.counting._batch_size import batches_in
from tracker_core.data._compact import compact_loader, expand_loader
from tracker_core.data._epoch import EpochRecord, FastForward, Site
from tracker_core.data._own_state import LoaderKind, OwnState, is_stateful, warn_counted_twice, warn_order_drawn_again
from tracker_core.data._plain import warn_persistent_workers, warn_plain_mid_epoch
from tracker_core.data._saved_loader import (
    STATE_VERSION,
    SavedLoader,
    check_kind,
    check_saved_epoch,
    read_header,
)
from tracker_core.data._torch_compat import live_iterator
from tracker_core.state._codec import tensor_to_text

# Settings that must not change between a save and its resume: the epoch order depends on them.
_SAME_ORDER_KEYS = ("seed", "shuffle", "dataset_size")
_Generators = dict[str, tuple[torch.Generator, torch.Tensor]]  # a loader's generators and their saved states
# Each loader's position: the loader carries nothing of the tracker's.
_POSITIONS: weakref.WeakKeyDictionary[DataLoader[Any], LoaderPosition] = weakref.WeakKeyDictionary()


@dataclasses.dataclass(frozen=True)
class ParsedLoader:
    """A saved state checked against its loader, ready for ``LoaderPosition`` to arm."""

    skip: int
    generators: _Generators
    record: EpochRecord | None
    workers_restarted: bool = False  # saved with persistent workers started, resumed at the next epoch: new ones


class LoaderPosition:
    """Where a DataLoader is within its epochs, saved as plain data and restored: exactly at any batch for a loader
    with its own state (torchdata's ``StatefulDataLoader``), between epochs for a plain one (warned inside an epoch).

    Create before the loader is first iterated; the framework keeps the same object::

        position = LoaderPosition(loader)  # lives as long as the loader
        state = position.state_dict(batches_consumed=5, in_epoch=True)  # at a checkpoint
        # fresh process, same loader configuration:
        LoaderPosition(loader).load_state_dict(state)  # a StatefulDataLoader's next epoch starts at batch 5
    """

    def __init__(self, loader: DataLoader[Any]) -> None:
        """Position ``loader`` (nothing is set on it). ``TypeError`` for a non-DataLoader, ``ValueError`` if the loader
        already has a position or has its own state and uses ``in_order=False`` with workers."""
        if not isinstance(loader, DataLoader):
            raise TypeError(f"LoaderPosition needs a torch DataLoader, got {type(loader).__name__}")
        if LoaderPosition.of(loader) is not None:
            raise ValueError("this loader already has a LoaderPosition; keep using that one")
        own = is_stateful(loader)
        if own and loader.num_workers > 0 and not getattr(loader, "in_order", True):
            raise ValueError("in_order=False with workers yields batches in a racy order; it cannot resume exactly")
        self._site = Site(loader)
        self._own = OwnState(self._site) if own else None  # None: a plain loader
        self._before_build: dict[str, torch.Tensor] = {}  # its generators' states at iterator_building
        _POSITIONS[loader] = self

    @classmethod
    def of(cls, loader: DataLoader[Any]) -> LoaderPosition | None:
        """The position of ``loader``, or None."""
        return _POSITIONS.get(loader)

    @property
    def loader(self) -> DataLoader[Any]:
        """The positioned loader; ``RuntimeError`` if nothing else kept it alive."""
        return self._site.loader

    def holds(self, loader: object) -> bool:
        """Whether this position is the one of ``loader``."""
        return self._site.loader_or_none() is loader

    @property
    def kind(self) -> LoaderKind:
        """The resume mechanism: ``"own_state"`` (the loader's own state) or ``"plain"`` (between epochs only)."""
        return "plain" if self._own is None else "own_state"

    @property
    def saves_own_state(self) -> bool:
        """Whether a loader with its own state (kind ``"own_state"``) has it saved and loaded back by this position
        (True, the default) or by the framework, which restores it itself (False: Lightning, Accelerate)."""
        return self._own is not None and self._own.saves_state

    @saves_own_state.setter
    def saves_own_state(self, saves: bool) -> None:
        if self._own is not None:
            self._own.saves_state = saves

    @property
    def fast_forward(self) -> FastForward | None:
        """The last resume's reading of already-trained batches (how many, seconds), or None if it read none."""
        return None if self._own is None else self._own.fast_forward

    def report_fast_forwards(self, record: Callable[[float], None]) -> None:
        """Call ``record(seconds)`` after each resume that reads already-trained batches again (not kept by a copy)."""
        if self._own is not None:
            self._own.on_fast_forward = record

    # --- saving -------------------------------------------------------------------------

    def state_dict(
        self, *, batches_consumed: int, in_epoch: bool | None = None, before_build: bool = False
    ) -> dict[str, Any]:
        """Plain data: the generators, the loader's own state, plus ``batches_consumed``, the epoch's batches whose
        training steps completed (between epochs, 0 or the finished epoch's length). ``ValueError`` if it is negative.
        Counted past an epoch's length, the framework read the loader again within its epoch: a plain loader is saved
        as inside its epoch, one with its own state at that count within its pass in flight. ``in_epoch``: an epoch
        has begun and not ended (a loader saved there, even before its first batch, resumes inside it: a plain one is
        warned); None: inside an epoch if some but not all of its batches were consumed. ``before_build``: its
        generators as at :meth:`iterator_building` (the iterator built since, which no batch read, is built again by
        a resumed run)."""
        if isinstance(batches_consumed, bool) or not isinstance(batches_consumed, int):
            raise TypeError(f"batches_consumed must be an int, got {type(batches_consumed).__name__}")
        if batches_consumed < 0:
            raise ValueError(f"batches_consumed must be >= 0, got {batches_consumed}")
        per_epoch = self._batches_per_epoch()
        loader, own = self.loader, self._own
        if own is None:
            # A loop that reads a plain loader whole after a mid-epoch resume counts past its length: still inside.
            record = self._plain_record(batches_consumed, per_epoch, in_epoch)
            batches_consumed = batches_consumed if per_epoch is None else min(batches_consumed, per_epoch)
        else:
            if per_epoch is not None and batches_consumed > per_epoch:  # its own state holds the pass in flight
                batches_consumed = batches_consumed % per_epoch if per_epoch else 0
            record = own.saved_record(batches_consumed)
            if batches_consumed != per_epoch and (batches_consumed > 0 if in_epoch is None else in_epoch):
                drawn = own.order_drawn_again(batches_consumed)
                if drawn is not None:
                    warn_order_drawn_again(loader, "saving", drawn)
                if record is not None and record.read_again:
                    warn_counted_twice(loader)
            elif (  # between epochs, or at an epoch's end this position does not restore: new workers start the next
                loader.persistent_workers
                and live_iterator(loader) is not None
                and (not own.saves_state or batches_consumed != per_epoch)
            ):
                warn_persistent_workers(loader, "saving")
        generators = self._generators()
        before = self._before_build if before_build else {}
        # A plain loader's record is empty.
        epoch = None if record is None else {} if own is None else own.epoch_to_plain()
        state = {
            "version": STATE_VERSION,
            "kind": self.kind,
            "batches_consumed": batches_consumed,
            "batches_per_epoch": per_epoch,
            "num_workers": loader.num_workers,
            "generators": {
                path: tensor_to_text(before[path] if path in before else g.get_state())
                for path, g in generators.items()
            },
            "epoch": epoch,
            "distributed": self.distributed_info(),
        }
        if own is not None and own.fast_forward is not None:
            state["fast_forward"] = dataclasses.asdict(own.fast_forward)
        return compact_loader(state)

    def _plain_record(self, batches_consumed: int, per_epoch: int | None, in_epoch: bool | None) -> EpochRecord | None:
        """A plain loader's epoch record: an empty one when saved inside an epoch (warned), else None."""
        loader = self.loader
        if live_iterator(loader) is not None:  # kept by persistent workers, once started
            warn_persistent_workers(loader, "saving")
        if batches_consumed == per_epoch or not (batches_consumed > 0 if in_epoch is None else in_epoch):
            return None
        warn_plain_mid_epoch(loader, "saving", batches_consumed)
        return EpochRecord()

    def distributed_info(self) -> dict[str, Any] | None:
        """The loader's sharding, as ``SamplerChain.distributed_info`` gives it, or None."""
        return self._site.chain.distributed_info(self.loader.batch_size)

    # --- loading ------------------------------------------------------------------------

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Validate ``state`` fully, restore the loader's generators, and (a loader with its own state) arm the next
        ``iter(loader)`` to resume the saved epoch after its first ``batches_consumed`` batches; later epochs follow as
        in the uninterrupted run. A plain loader's state saved inside an epoch warns (its epoch is read whole). On a
        bad state raises ``ProgressStateError`` (key path and problem), changing nothing."""
        header = read_header(expand_loader(state, ""), "", self.kind)
        generators = self._check_header(header)  # this loader's checks first
        self.arm(self._parsed(check_saved_epoch(header), generators, resume_epoch=True))

    def forget_replay(self) -> None:
        """A loaded state is not resumed after all: the next epoch is read whole."""
        if self._own is not None:
            self._own.forget()

    def iterator_building(self) -> None:
        """The framework is about to build the loader's iterator: its generators' states of now are kept (for
        :meth:`state_dict`'s ``before_build``), and a resumed epoch's too (``OwnState.iterator_building``)."""
        self._before_build = {path: g.get_state() for path, g in self._generators().items()}
        if self._own is not None:
            self._own.iterator_building()

    def iterator_built(self, prefetched: bool = False) -> None:
        """The framework built the resumed epoch's iterator (before its first batch; ``prefetched``: and fetched a
        batch): the draws of the build are undone (``OwnState.iterator_built``)."""
        if self._own is not None:
            self._own.iterator_built(prefetched)

    def built_for_save(self) -> None:
        """A save before the resumed epoch's first batch (``OwnState.built_for_save``)."""
        if self._own is not None:
            self._own.built_for_save()

    def undo_point(self) -> Callable[[], None]:
        """A call that disarms this position and puts back its generators' states as they are now (nothing if its
        loader is gone by then): a load that arms it can be undone."""
        states = {path: g.get_state() for path, g in self._generators().items()}

        def put_back() -> None:
            if self._site.loader_or_none() is None:
                return
            self.forget_replay()
            generators = self._generators()
            for path, state in states.items():
                if path in generators:
                    generators[path].set_state(state)

        return put_back

    def arm(self, parsed: ParsedLoader) -> None:
        """Arm a state that :meth:`check` accepted; cannot fail."""
        for generator, saved in parsed.generators.values():
            generator.set_state(saved)
        if self._own is None:
            if parsed.record is not None:
                warn_plain_mid_epoch(self.loader, "resuming", parsed.skip)
            return
        if parsed.workers_restarted:
            warn_persistent_workers(self.loader, "resuming from a save of")
        inside = 0 < parsed.skip != self._batches_per_epoch()
        self._own.arm(parsed.record, parsed.skip, inside, frozenset(parsed.generators))

    def check(self, saved: SavedLoader, resume_epoch: bool) -> ParsedLoader:
        """Check a state that ``check_saved_loader`` accepted against this loader (its epoch record dropped unless
        ``resume_epoch``)."""
        check_kind(saved.kind, self.kind, "")
        return self._parsed(saved, self._check_header(saved), resume_epoch)

    def _parsed(self, saved: SavedLoader, generators: _Generators, resume_epoch: bool) -> ParsedLoader:
        record = None
        if saved.epoch is not None:
            record = EpochRecord() if self._own is None else self._own.read_epoch(saved.epoch)
        own = self._own
        # A state saved once a persistent loader's workers started, whose next epoch new workers start: one saved
        # between epochs (dropped here), or at an epoch's end that the framework restores rather than this position.
        ended = not resume_epoch or (saved.skip == saved.per_epoch and own is not None and not own.saves_state)
        restarted = ended and own is not None and record is not None and self.loader.persistent_workers
        return ParsedLoader(saved.skip, generators, record if resume_epoch else None, restarted)

    def _check_header(self, header: SavedLoader) -> _Generators:
        """Check a saved state's top-level fields against this loader; its generators and their saved states."""
        if header.per_epoch is not None:
            mine = self._batches_per_epoch()
            if mine is not None and mine != header.per_epoch:
                raise ProgressStateError(
                    "batches_per_epoch", f"saved with {header.per_epoch} batches per epoch; this loader has {mine}"
                )
        workers = self.loader.num_workers
        if self._own is not None and header.workers != workers:  # the order a plain loader resumes is not saved
            raise ProgressStateError(
                "num_workers",
                f"saved with {header.workers} workers; this loader has {workers}, and its order depends on it",
            )
        samplers = self._site.chain.samplers()  # walked once for the checks below
        self._check_distributed(header.distributed, samplers)
        return self._site.chain.read_generator_states(
            header.fields["generators"], "generators", self.loader.generator, samplers
        )

    def _check_distributed(self, saved: dict[str, Any] | None, samplers: dict[str, Any]) -> None:
        """A saved sharding (DistributedSampler or batch shards) must match this loader's (when both have one)."""
        if saved is None:
            return
        mine = self._site.chain.distributed_info(self.loader.batch_size, samplers)
        if mine is None:
            return
        for name in _SAME_ORDER_KEYS:
            if saved[name] != mine[name]:
                raise ProgressStateError(
                    f"distributed.{name}",
                    f"saved with {name}={saved[name]!r}; this loader's sampler has {mine[name]!r}, "
                    "so the epoch's order differs",
                )
        for name in ("num_replicas", "rank"):
            if saved[name] != mine[name]:
                raise ProgressStateError(
                    f"distributed.{name}",
                    f"saved by rank {saved['rank']} of {saved['num_replicas']}; this loader is rank "
                    f"{mine['rank']} of {mine['num_replicas']} (save with Tracker.gathered_state_dict() "
                    "to resume every rank, or at another world size)",
                )

    # --- what fixes the order -----------------------------------------------------------

    def _generators(self) -> dict[str, torch.Generator]:
        return self._site.chain.generators(self.loader.generator)

    def _batches_per_epoch(self) -> int | None:
        # len() of an iterable loader is a hint, and calling it arms a warning
        return None if isinstance(self.loader.dataset, IterableDataset) else batches_in(self.loader)
