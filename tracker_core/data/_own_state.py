"""A loader with a public state of its own (torchdata's ``StatefulDataLoader``, or any loader with ``state_dict`` /
``load_state_dict``) is positioned by that state, through public calls only (docs/resume.md, docs/design.md).
"""

from __future__ import annotations

import time
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Literal

import torch
from torch.utils.data import IterableDataset, RandomSampler

from tracker_core._errors import InexactResumeWarning, ProgressStateError
from tracker_core.counting import _clock
from tracker_core.data._epoch import EpochRecord, FastForward, Site
from tracker_core.data._fast_forward import describe, warn_reading_again
from tracker_core.data._rng import GlobalRng, expanded, preserved_global_rng, read_generator_state
from tracker_core.data._torch_compat import build_iterator, live_iterator, sampler_indices
from tracker_core.data._torchdata_state import class_name, read_own_state
from tracker_core.state._codec import from_plain, tensor_to_text, to_plain

# "own_state": positioned by the loader's own state; "plain": a DataLoader without one, resumed between epochs only.
LoaderKind = Literal["own_state", "plain"]


def is_stateful(obj: object) -> bool:
    """Whether ``obj`` carries its own position: torchdata's ``Stateful`` protocol (``state_dict`` and
    ``load_state_dict``), which Hugging Face ``datasets.IterableDataset`` follows too."""
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


class OwnState:
    """Leaves the position to the loader's own state: saved and loaded back here, or by the framework (Lightning,
    Accelerate). The resumed iterator is built under the RNGs its epoch began with; the order's generators are then
    set back as the checkpoint left them, so the build takes nothing from the training's random stream."""

    saves_state = True  # False: the framework saves and restores the loader's state
    epoch: EpochRecord | None = None  # the most recently begun epoch
    replay: EpochRecord | None = None  # the epoch a load armed, resumed after its first ``skip`` batches
    skip = 0
    fast_forward: FastForward | None = None  # the last resume's, when it read batches again
    on_fast_forward: Callable[[float], None] | None = None  # told the seconds of each; not pickled
    indices: Callable[[], object] | None = None  # weakly, the index iterator of the epoch seen last; not pickled
    _generators: tuple[tuple[torch.Generator, torch.Tensor], ...] = ()  # the order's generators, as the load left them
    _unset: frozenset[str] = frozenset()  # the paths of those the load left to the loader's own state

    def __init__(self, site: Site, previous_hook: Any) -> None:
        self.site = site
        self._previous_hook = previous_hook  # an instance-level _get_iterator someone else set

    def __getstate__(self) -> dict[str, Any]:
        """A copy (pickle, deepcopy) tells no one (the callback belongs to the tracker of the original) and cannot
        tell a later epoch from the one seen last."""
        return {**self.__dict__, "on_fast_forward": None, "indices": None}

    def build(self) -> Any:
        """An iterator built as the loader would build it without a position."""
        if self._previous_hook is not None:
            return self._previous_hook()
        return build_iterator(self.site.loader)

    def iterator(self) -> Any:
        """The loader's next iterator: the armed epoch's, positioned, or a new epoch's, its record noted."""
        if self.replay is not None:
            return self._replayed(self.replay, self.skip)
        generator = self.site.loader.generator
        self.epoch = record = EpochRecord(GlobalRng.capture(), None if generator is None else generator.get_state())
        record.began = self._states()
        iterator = self.build()
        record.built = self._states()
        return self._noted(iterator)

    def _states(self) -> dict[str, torch.Tensor]:
        return {path: g.get_state() for path, g in self.site.chain.generators(self.site.loader.generator).items()}

    def _replayed(self, record: EpochRecord, skip: int) -> Any:
        """Build the iterator of the armed epoch, positioned at ``skip``, under the RNGs the epoch began with (the
        global ones put back after it)."""
        loader = self.site.loader
        self.epoch, self.replay = record, None
        with preserved_global_rng():
            if record.iterator_rng is not None:
                record.iterator_rng.apply()
                if record.loader_generator is not None and loader.generator is not None:
                    loader.generator.set_state(record.loader_generator)
            if record.state is not None:
                loader.load_state_dict(record.state)  # type: ignore[attr-defined]
                record.state = None
            if skip and self.order_drawn_again(record):
                warn_order_drawn_again(loader, "resuming")
            read = isinstance(loader.dataset, IterableDataset) and not is_stateful(loader.dataset)
            with self._reading_again(skip if read else 0):
                iterator = self.build()
        record.read_again = read and skip > 0
        for generator, state in self._generators:  # the build drew from them (a sampler's load sets its back, and
            generator.set_state(state)  # draws again): as the checkpoint left them
        record.built, record.fixed = self._states(), self._unset
        return self._noted(iterator)

    @contextmanager
    def _reading_again(self, batches: int) -> Iterator[None]:
        """Warn (before it starts) that the block reads ``batches`` batches again, time it into ``fast_forward`` and
        tell ``on_fast_forward`` the seconds (the progress records them); with no batch to read, only run it."""
        self.fast_forward = None
        if batches <= 0:
            yield
            return
        warn_reading_again(self.site.loader, batches)
        began, began_us = time.perf_counter(), _clock.now_us()
        yield
        self.fast_forward = FastForward(batches, time.perf_counter() - began)
        if self.on_fast_forward is not None:  # the progress's time, on the clock of all its times
            self.on_fast_forward((_clock.now_us() - began_us) / 1e6)

    def _noted(self, iterator: Any) -> Any:
        """Note the index iterator of the epoch ``iterator`` begins: persistent workers reset that iterator for each
        later epoch, drawing a new one, unseen here."""
        try:
            self.indices = weakref.ref(sampler_indices(iterator))
        except TypeError:  # no index iterator, or one without weak references: later epochs cannot be told apart
            self.indices = None
        return iterator

    def saved_record(self, batches_consumed: int) -> EpochRecord | None:
        """The record of the epoch saved; without starting RNGs for an epoch this position did not see begin: read
        from an iterator built before it (``state_dict()`` builds one) or one its persistent workers reset for a
        later epoch."""
        record = self.epoch
        if record is None:
            return EpochRecord() if batches_consumed else None
        live, indices = live_iterator(self.site.loader), self.indices
        if indices is None or live is None or sampler_indices(live) is indices():
            return record
        return EpochRecord()

    def order_drawn_again(self, record: EpochRecord | None) -> bool:
        """An order from torch's own ``RandomSampler`` under an index sampler without a state of its own, which the
        loader positions by drawing it again: at 0 workers, or in an epoch whose starting RNGs ``record`` lacks."""
        loader = self.site.loader
        if loader.num_workers and (record is None or record.iterator_rng is not None):
            return False
        index_sampler = loader.sampler if loader.batch_sampler is None else loader.batch_sampler
        samplers = self.site.chain.samplers().values()
        return not is_stateful(index_sampler) and any(type(s) is RandomSampler for s in samplers)

    def arm(self, record: EpochRecord | None, skip: int, loaded: frozenset[str]) -> None:
        """Arm the resume of ``record`` after ``skip`` batches (None: the next epoch is new); note the ``loaded``
        generators (by path) as set, the others as left to the loader's state."""
        self.epoch, self.replay, self.skip = record, record, skip
        # A load, even of an empty state, drops the iterator a StatefulDataLoader keeps (one its state_dict() built
        # before the first epoch, or its persistent workers').
        self.site.loader.load_state_dict({})  # type: ignore[attr-defined]
        generators = self.site.chain.generators(self.site.loader.generator)
        self._generators = tuple((g, g.get_state()) for path, g in generators.items() if path in loaded)
        self._unset = frozenset(generators) - loaded

    def epoch_to_plain(
        self, record: EpochRecord, generators: dict[str, torch.Generator], mid_epoch: bool
    ) -> tuple[dict[str, Any], dict[str, torch.Generator]]:
        """The saved epoch record (its starting RNGs and, unless the framework saves it, the loader's state) and the
        ``generators`` to save beside it: mid-epoch, not those the loader's state sets as they are now."""
        plain = {
            "iterator_rng": None if record.iterator_rng is None else expanded(record.iterator_rng),
            "loader_generator": None if record.loader_generator is None else tensor_to_text(record.loader_generator),
        }
        if not self.saves_state:
            return plain, generators
        state = record.state  # loaded, its epoch not begun again yet
        if state is None:
            state = self.site.loader.state_dict()  # type: ignore[attr-defined]
        loader_state = to_plain(state, "epoch.loader_state")
        if mid_epoch and record.built is not None:
            generators = {path: g for path, g in generators.items() if not _set_by(state, record, path, g)}
        return {**plain, "loader_class": class_name(self.site.loader), "loader_state": loader_state}, generators

    def read_epoch(self, fields: Mapping[str, Any], iterator_rng: GlobalRng | None) -> EpochRecord:
        """The record of an epoch checked by ``check_saved_epoch``, checked against this loader (key ``epoch``)."""
        record = EpochRecord(iterator_rng)
        generator = self.site.loader.generator
        if fields.get("loader_generator") is not None:
            if generator is None:
                raise ProgressStateError("epoch.loader_generator", "this loader has no generator")
            record.loader_generator = read_generator_state(
                fields["loader_generator"], "epoch.loader_generator", generator
            )
        if "loader_state" in fields or "loader_class" in fields:
            saved, mine = read_own_state(fields, "epoch"), class_name(self.site.loader)
            if saved[0] != mine:
                raise ProgressStateError("epoch.loader_class", f"saved by a {saved[0]}; this loader is a {mine}")
            record.state = from_plain(saved[1], "epoch.loader_state")  # its layout checked with the header's counts
        return record


def _set_by(state: Any, record: EpochRecord, path: str, generator: torch.Generator) -> bool:
    """Whether resuming the loader's own ``state`` sets a sampler's ``generator`` as it is now: nothing drew from it
    since the epoch's build, and the state holds it as the build began (or the load that built the epoch left it to
    the state). Not the loader's generator (path ``generator``): the build draws its workers' seed from it too."""
    built = None if record.built is None else record.built.get(path)
    if path == "generator" or built is None or not torch.equal(generator.get_state(), built):
        return False
    began = None if record.began is None else record.began.get(path)
    return path in record.fixed or (began is not None and any(torch.equal(began, t) for t in _byte_tensors(state)))


def _byte_tensors(value: Any) -> Iterator[torch.Tensor]:
    """The ``uint8`` tensors (generator states) anywhere in a loader's state."""
    if isinstance(value, torch.Tensor) and value.dtype == torch.uint8:
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _byte_tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _byte_tensors(item)


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


def warn_order_drawn_again(loader: Any, doing: str) -> None:
    """The trade of :meth:`OwnState.order_drawn_again`, named at a mid-epoch save and at its resume."""
    warnings.warn(
        f"{doing} {describe(loader)} mid-epoch by its own state: its RandomSampler has no state of its own, so the "
        "resumed loader draws the epoch's order again, from the global RNG as restored, not as the epoch began (at 0 "
        "workers; with workers, an epoch read from an iterator built before the tracker saw it, e.g. by prepare()): "
        "the rest of the epoch's order and later random draws differ from the uninterrupted run. Give it a sampler "
        "with a state (StatefulDataLoader(shuffle=True) builds one)",
        InexactResumeWarning,
        stacklevel=3,
    )
