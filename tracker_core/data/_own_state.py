"""A loader with a public state of its own (torchdata's ``StatefulDataLoader``, or any loader with ``state_dict`` /
``load_state_dict``) is positioned by that state, through public calls only (docs/resume.md, docs/design.md).
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import Any, Literal

import torch
from torch.utils.data import IterableDataset, RandomSampler, SubsetRandomSampler, WeightedRandomSampler

from tracker_core._errors import InexactResumeWarning, ProgressStateError
from tracker_core.counting import _clock
from tracker_core.data._epoch import EpochRecord, FastForward, Site
from tracker_core.data._fast_forward import describe, warn_reading_again
from tracker_core.data._rng import GlobalRng
from tracker_core.data._torch_compat import live_iterator
from tracker_core.data._torchdata_state import class_name, read_own_state
from tracker_core.state._codec import from_plain, to_plain

# "own_state": positioned by the loader's own state; "plain": a DataLoader without one, resumed between epochs only.
LoaderKind = Literal["own_state", "plain"]
# torch's samplers that draw their order from an RNG (their generator, else the global one) each time they are iterated,
# with no state of their own; exact types: a subclass may keep one (torchdata's own samplers keep theirs).
_DRAWN_WHEN_ITERATED = (RandomSampler, WeightedRandomSampler, SubsetRandomSampler)


def is_stateful(obj: object) -> bool:
    """Whether ``obj`` carries its own position: torchdata's ``Stateful`` protocol (``state_dict`` and
    ``load_state_dict``), which Hugging Face ``datasets.IterableDataset`` follows too."""
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


class OwnState:
    """Leaves the position to the loader's own state, through its public ``state_dict`` / ``load_state_dict``: saved
    and handed back here (the resumed iterator built at the load, see :meth:`arm`), or by the framework (Lightning,
    Accelerate), which tells the tracker right before and after it builds the resumed iterator
    (``Tracker.train_iterators_building`` / ``train_iterators_built``). Either way the build's draws are undone: the
    global RNG goes back to what it was right before the build, the order's loaded generators to what the load left."""

    saves_state = True  # False: the framework saves and restores the loader's state
    fast_forward: FastForward | None = None  # the last resume's, when it read batches again
    on_fast_forward: Callable[[float], None] | None = None  # told the seconds of each; not pickled
    _armed = False  # a load resumed an epoch: forget() drops the loader's iterator built from it
    # The RNGs the framework's resumed build puts back, the batches it reads again and when they began (µs).
    _settle: tuple[GlobalRng, _States, int, int] | None = None
    _read_again_by: Callable[[], object] | None = None  # weakly, the iterator of a resume that read batches again

    def __init__(self, site: Site) -> None:
        self.site = site

    def __getstate__(self) -> dict[str, Any]:
        """A copy (pickle, deepcopy) tells no one: the callback belongs to the tracker of the original."""
        return {**self.__dict__, "on_fast_forward": None, "_read_again_by": None}

    def saved_record(self, batches_consumed: int) -> EpochRecord | None:
        """The record of the epoch saved, which the loader's state fills at the save; None before the loader's first
        epoch."""
        live = live_iterator(self.site.loader)
        if not batches_consumed and live is None and not self._armed:
            return None
        return EpochRecord(read_again=self._read_again_by is not None and self._read_again_by() is live)

    def order_drawn_again(self, skip: int) -> str | None:
        """The type name of a sampler of torch's that draws its order when iterated (``_DRAWN_WHEN_ITERATED``) under an
        index sampler without a state of its own: torchdata resumes it after ``skip`` batches by iterating it again (at
        0 workers, not before the first batch), drawing another order from its RNG as the checkpoint left it, not as
        the epoch began. None if there is none."""
        loader = self.site.loader
        if not skip and not loader.num_workers:
            return None
        index_sampler = loader.sampler if loader.batch_sampler is None else loader.batch_sampler
        if is_stateful(index_sampler):
            return None
        samplers = self.site.chain.samplers().values()
        return next((type(s).__name__ for s in samplers if type(s) in _DRAWN_WHEN_ITERATED), None)

    def arm(self, record: EpochRecord | None, skip: int, inside: bool, loaded: frozenset[str]) -> None:
        """Resume ``record`` after ``skip`` batches (None: the next epoch is new; ``inside``: not at its end). A state
        saved here is handed to the loader and its iterator built now, by ``state_dict()`` (a StatefulDataLoader's next
        ``iter()`` reuses it), then settled as :meth:`iterator_built` does; the ``loaded`` generators (by path) are set
        back as the checkpoint left them. A state the framework restores: noted for :meth:`iterator_built`."""
        loader = self.site.loader
        # A load, even of an empty state, drops the iterator a StatefulDataLoader keeps (one its state_dict() built
        # before the first epoch, or its persistent workers').
        loader.load_state_dict({})  # type: ignore[attr-defined]
        self._armed, self._settle, self.fast_forward, self._read_again_by = record is not None, None, None, None
        if record is None:
            return
        drawn = self.order_drawn_again(skip) if inside else None
        if drawn is not None:
            warn_order_drawn_again(loader, "resuming", drawn)
        generators = self.site.chain.generators(loader.generator)
        noted = tuple((g, g.get_state()) for path, g in generators.items() if path in loaded)
        read = skip if isinstance(loader.dataset, IterableDataset) and not is_stateful(loader.dataset) else 0
        if read:
            warn_reading_again(loader, read)
        settle = (GlobalRng.capture(), noted, read, _clock.now_us())
        if record.state is not None:
            loader.load_state_dict(record.state)  # type: ignore[attr-defined]
        # A sampler the framework sets the epoch of (DistributedSampler) draws the resumed order when the framework
        # builds the iterator, after its set_epoch: then, as with a state the framework restores, it tells the tracker.
        if record.state is not None and not (inside and self.site.chain.epoch_set()):
            loader.state_dict()  # type: ignore[attr-defined]
            self._put_back(*settle)
        elif skip and (record.state is not None or not self.saves_state):  # (between epochs, a new one draws)
            self._settle = settle

    def iterator_building(self) -> None:
        """The framework is about to build the resumed epoch's iterator: the global RNG to put back after the build is
        the one of now (a reseed since the load stays), and the batches it reads again are timed from now."""
        if self._settle is not None:
            self._settle = (GlobalRng.capture(), *self._settle[1:3], _clock.now_us())

    def iterator_built(self, prefetched: bool = False) -> None:
        """The framework built the resumed epoch's iterator: put back the global RNG as the load (or
        :meth:`iterator_building`) left it, not where it ``prefetched`` a batch, whose draws stay, and the loaded
        generators. Not built: the framework dropped the state it restored (its next iterator begins an epoch)."""
        settle, self._settle = self._settle, None
        if settle is not None and live_iterator(self.site.loader) is not None:
            self._put_back(*settle, prefetched=prefetched)

    def built_for_save(self) -> None:
        """A save before the resumed epoch's first batch: where the framework restored the state and saves it after
        the tracker's entry (Accelerate), its iterator is built now, as the framework's ``state_dict()`` is about to;
        the build's draws are undone either way (:meth:`iterator_built`), a reseed since the load kept."""
        if self._settle is not None and not self.saves_state and live_iterator(self.site.loader) is None:
            self.iterator_building()
            self.site.loader.state_dict()  # type: ignore[attr-defined]
        self.iterator_built()

    def _put_back(self, rng: GlobalRng, noted: _States, read: int, began_us: int, prefetched: bool = False) -> None:
        """Undo a resumed build's draws; count the ``read`` batches it read again since ``began_us``."""
        if not prefetched:
            rng.apply()
        for generator, state in noted:
            generator.set_state(state)
        if read:
            self.fast_forward = FastForward(read, (_clock.now_us() - began_us) / 1e6)
            if self.on_fast_forward is not None:  # the progress's time, on the clock of all its times
                self.on_fast_forward(self.fast_forward.seconds)
        live = live_iterator(self.site.loader) if read else None  # torchdata counts the batches read again twice
        self._read_again_by = None if live is None else weakref.ref(live)

    def forget(self) -> None:
        """A loaded state not resumed after all: the loader drops the iterator built from it (its next epoch is new)."""
        self._settle = None
        if self._armed:
            self.site.loader.load_state_dict({})  # type: ignore[attr-defined]
            self._armed = False

    def epoch_to_plain(self) -> dict[str, Any]:
        """The saved epoch record: the loader's state, unless the framework saves it (then empty)."""
        if not self.saves_state:
            return {}
        loader_state = to_plain(self.site.loader.state_dict(), "epoch.loader_state")  # type: ignore[attr-defined]
        return {"loader_class": class_name(self.site.loader), "loader_state": loader_state}

    def read_epoch(self, fields: Mapping[str, Any]) -> EpochRecord:
        """The record of an epoch checked by ``check_saved_epoch``, checked against this loader (key ``epoch``)."""
        record = EpochRecord()
        if "loader_state" in fields or "loader_class" in fields:
            saved, mine = read_own_state(fields, "epoch"), class_name(self.site.loader)
            if saved[0] != mine:
                raise ProgressStateError("epoch.loader_class", f"saved by a {saved[0]}; this loader is a {mine}")
            record.state = from_plain(saved[1], "epoch.loader_state")  # its layout checked with the header's counts
        return record


_States = tuple[tuple[torch.Generator, torch.Tensor], ...]  # generators and the states to set them to


def warn_counted_twice(loader: Any) -> None:
    """torchdata 0.11's StatefulDataLoader, resumed over a dataset without a state of its own, counts the batches it
    read again twice in its next state (a resume from it skips them at 0 workers, and fails with workers)."""
    warnings.warn(
        f"saving {describe(loader)} mid-epoch after a resume that read its batches again: torchdata's "
        "StatefulDataLoader counts those batches twice in its state, so a resume from this checkpoint skips as many "
        "(0 workers) or fails (with workers). Give the dataset a state of its own (state_dict / load_state_dict)",
        InexactResumeWarning,
        stacklevel=3,
    )


def warn_order_drawn_again(loader: Any, doing: str, sampler: str) -> None:
    """The trade of :meth:`OwnState.order_drawn_again` (``sampler``: its type name), named at a mid-epoch save and at
    its resume."""
    warnings.warn(
        f"{doing} {describe(loader)} mid-epoch by its own state: its {sampler} has no state of its own, so the "
        "resumed loader draws the epoch's order again, from its RNG (its generator, else the global one) as restored, "
        "not as the epoch began: the rest of the epoch is read in another order than the uninterrupted run's. Give it "
        "a sampler with a state of its own (state_dict / load_state_dict), such as torchdata's "
        "(StatefulDataLoader(shuffle=True) builds one)",
        InexactResumeWarning,
        stacklevel=3,
    )
