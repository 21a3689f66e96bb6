"""A loader with a public state of its own (torchdata's ``StatefulDataLoader``, or any loader with ``state_dict`` /
``load_state_dict``) is positioned by that state, through public calls only (docs/resume.md, docs/design.md).
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Mapping
from typing import Any, Literal

import torch
from torch.utils.data import IterableDataset, RandomSampler

from tracker_core._errors import InexactResumeWarning, ProgressStateError
from tracker_core.data._epoch import EpochRecord, Replay, Site
from tracker_core.data._fast_forward import describe, reading_again
from tracker_core.data._rng import GlobalRng, expanded, read_generator_state
from tracker_core.data._torch_compat import live_iterator, sampler_indices
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
    _generators: tuple[tuple[torch.Generator, torch.Tensor], ...] = ()  # the order's generators, as the load left them

    def __init__(self, site: Site) -> None:
        self.site = site

    def begin(self) -> Any:
        """Build a new epoch's iterator (``cursor.epoch`` holds its new record)."""
        return self._noted(self.site.build())

    def replay(self, replay: Replay) -> Any:
        """Build the iterator of the armed epoch, positioned at ``replay.skip`` (the global RNGs are saved around it,
        the epoch's iterator RNGs applied)."""
        cursor = self.site.cursor
        cursor.replay = None
        loader = self.site.loader
        if replay.record.state is not None:
            loader.load_state_dict(replay.record.state)  # type: ignore[attr-defined]
            replay.record.state = None
        if replay.skip and self.order_drawn_again(replay.record):
            warn_order_drawn_again(loader, "resuming")
        read = isinstance(loader.dataset, IterableDataset) and not is_stateful(loader.dataset)
        why = "its dataset has no state of its own (state_dict / load_state_dict): the loader reads it again"
        with reading_again(cursor, loader, replay.skip if read else 0, why):
            iterator = self.site.build()
        replay.record.read_again = read and replay.skip > 0
        for generator, state in self._generators:  # the build drew from them (a sampler's load sets its back, and
            generator.set_state(state)  # draws again): as the checkpoint left them
        return self._noted(iterator)

    def _noted(self, iterator: Any) -> Any:
        """Note the index iterator of the epoch ``iterator`` begins: persistent workers reset that iterator for each
        later epoch, drawing a new one, unseen here."""
        try:
            self.site.cursor.indices = weakref.ref(sampler_indices(iterator))
        except TypeError:  # no index iterator, or one without weak references: later epochs cannot be told apart
            self.site.cursor.indices = None
        return iterator

    def saved_record(self, record: EpochRecord | None, batches_consumed: int) -> EpochRecord | None:
        """Without starting RNGs for an epoch this position did not see begin: read from an iterator built before
        it (``state_dict()`` builds one) or one its persistent workers reset for a later epoch."""
        if record is None:
            return EpochRecord() if batches_consumed else None
        live, indices = live_iterator(self.site.loader), self.site.cursor.indices
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

    def drop_iterator(self) -> None:
        """A load, even of an empty state, drops the iterator a StatefulDataLoader keeps (one its ``state_dict()``
        built before the first epoch, or its persistent workers')."""
        self.site.loader.load_state_dict({})  # type: ignore[attr-defined]

    def arm(self) -> None:
        self.drop_iterator()
        generators = self.site.chain.generators(self.site.loader.generator).values()
        self._generators = tuple((generator, generator.get_state()) for generator in generators)

    def epoch_to_plain(self, record: EpochRecord) -> dict[str, Any]:
        """The saved epoch record: its starting RNGs and, unless the framework saves it, the loader's state."""
        plain = {
            "iterator_rng": None if record.iterator_rng is None else expanded(record.iterator_rng),
            "loader_generator": None if record.loader_generator is None else tensor_to_text(record.loader_generator),
        }
        if not self.saves_state:
            return plain
        state = record.state  # loaded, its epoch not begun again yet
        if state is None:
            state = self.site.loader.state_dict()  # type: ignore[attr-defined]
        loader_state = to_plain(state, "epoch.loader_state")
        return {**plain, "loader_class": class_name(self.site.loader), "loader_state": loader_state}

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
