"""The one checkpoint entry every adapter saves: progress, train-data positions and global RNGs."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any, cast

from torch.utils.data import DataLoader

from tracker_core._errors import InexactResumeWarning, ProgressStateError
from tracker_core.counting import _clock
from tracker_core.counting._progress import Progress
from tracker_core.counting._view import ProgressView
from tracker_core.data._compact import compact_rng
from tracker_core.data._position import LoaderPosition, ParsedLoader
from tracker_core.data._rng import GlobalRng, expanded
from tracker_core.data._saved_loader import SavedLoader, check_saved_loader
from tracker_core.distributed._elastic import ENTRY_KEYS, Selected, reenters_train_epoch, saved_elsewhere, select, world
from tracker_core.distributed._to_writer import gather_to_writer
from tracker_core.state._codec import check_plain
from tracker_core.state._readers import keys_under, read_mapping
from tracker_core.state._schema import Parsed, parse


class Tracker:
    """Progress plus what an exact mid-epoch resume needs, saved and loaded as one entry of plain data
    (``{"progress", "train_loaders", "rng"}``; docs/adapters.md says how an adapter drives it)."""

    __slots__ = (
        "_loaded",
        "_loaders",
        "_pending",
        "_rng_before_build",
        "_undo",
        "_untracked",
        "progress",
    )

    def __init__(self) -> None:
        self.progress = Progress()
        self._loaders: dict[int, LoaderPosition] = {}
        self._untracked: dict[int, str] = {}  # train dataloaders that are not torch DataLoaders
        self._pending: dict[int, tuple[SavedLoader, bool]] = {}  # loaded, waiting for their loader
        self._undo: _Undo | None = None  # the last load's changes while a part waits; None for resume_loaded_again
        self._loaded: _LoadedParts | None = None  # the last load's loader parts (see resume_loaded_again)
        self._rng_before_build: GlobalRng | None = None  # the global RNGs at the last train_iterators_building

    @property
    def view(self) -> ProgressView:
        """The read-only view of the record (what ``get_progress`` returns)."""
        return self.progress.view

    def track_train_loader(self, loader: object, index: int = 0, *, framework_restores_state: bool = False) -> None:
        """Make train dataloader ``index`` resumable mid-epoch, in place (docs/adapters.md, step 4). A loaded part
        waiting for it is checked and armed now; one that does not fit undoes the load and raises
        ``ProgressStateError``. ``framework_restores_state``: the framework restores a ``StatefulDataLoader``'s own
        state. An iterable that is not a torch DataLoader is not positioned (a mid-epoch save warns)."""
        if not issubclass(type(loader), DataLoader):  # type(): wrappers may fake __class__
            self._loaders.pop(index, None)
            self._untracked[index] = type(loader).__name__
            return
        data_loader = cast("DataLoader[Any]", loader)  # its exact type is a DataLoader (checked above)
        position = self._loaders.get(index)
        if position is None or not position.holds(data_loader):
            position = LoaderPosition.of(data_loader) or LoaderPosition(data_loader)
        position.saves_own_state = not framework_restores_state
        began = _clock.now_us()
        parsed = self._parse_pending(position, index)  # a refusal raises before anything below
        self._untracked.pop(index, None)
        self._loaders[index] = position
        position.report_fast_forwards(self.progress._count_fast_forward)
        if parsed is None:
            return
        if self._undo is not None:
            self._undo.put_back.append(position.undo_point())
        position.arm(parsed)
        if not self._pending:
            self._undo = None
        self.progress._count_since(self.progress._checkpoint_restore_seconds, began)

    def _parse_pending(self, position: LoaderPosition, index: int) -> ParsedLoader | None:
        """The loaded part waiting for loader ``index``, checked against ``position`` (one that does not fit undoes
        the load and raises, or, of :meth:`resume_loaded_again`, warns and gives None); None if none waits."""
        pending = self._pending.pop(index, None)
        if pending is None:
            return None
        try:
            with keys_under(f"train_loaders.{index}"):
                return position.check(*pending)
        except ProgressStateError as error:
            if self._undo is not None:
                self._undo_load(self._undo)
                raise ProgressStateError(
                    error.key,
                    f"{error.problem} (the load was undone: progress, global RNGs and train loaders are as before it)",
                ) from None
            warnings.warn(  # a loader of a later fit that does not fit the loaded position: read it whole
                f"train dataloader {index} does not fit the loaded position it was to resume at "
                f"({error.key}: {error.problem}): this epoch reads it from its start",
                InexactResumeWarning,
                stacklevel=3,
            )
            return None

    def state_dict(self, *, epoch_ended: bool = False, before_build: bool = False) -> dict[str, Any]:
        """Plain data for the checkpoint (docs/schema.md); its time counts in ``microseconds.checkpoint_save``.
        ``epoch_ended``: the framework knows the train epoch's data was read to its end (saved as between epochs).
        ``before_build``: the framework built the train iterators since :meth:`train_iterators_building`, and no
        batch read them: the RNGs (global, the loaders' generators) are saved as they were then, for a resumed run
        builds them again (and no epoch is in flight for the loaders)."""
        began = _clock.now_us()
        train = self.progress.train
        counts = train._dataloaders
        # Outside a train epoch a load restores only generators (nothing is replayed), and the
        # framework may already have built the next epoch's iterator: nothing of it is consumed.
        in_train_epoch = reenters_train_epoch(train._epochs.lifetime())
        # an ended epoch's batches are all consumed; before the build, none (it is built again)
        in_epoch = in_train_epoch and not epoch_ended and not before_build
        if self._resumed_epoch_unbegun():  # a resumed iterator the framework's save builds (its state_dict()) draws
            for resumed in self._loaders.values():
                resumed.built_for_save()
        before = self._rng_before_build if before_build else None
        saved_rng = expanded(GlobalRng.capture() if before is None else before)
        loaders: list[dict[str, Any]] = []
        for index in range(max([len(counts), *(i + 1 for i in self._loaders), *(i + 1 for i in self._untracked)])):
            consumed = counts[index].batches.scopes().epoch if in_train_epoch and index < len(counts) else 0
            position = self._loaders.get(index)
            if position is not None:
                loaders.append(
                    position.state_dict(batches_consumed=consumed, in_epoch=in_epoch, before_build=before_build)
                )
            else:
                loaders.append({"kind": "untracked"})
                if consumed and in_epoch and self.view.train.is_mid_epoch:
                    name = self._untracked.get(index)
                    what = "was not given to the tracker" if name is None else f"({name}) is not a torch DataLoader"
                    warnings.warn(
                        f"train dataloader {index} {what}, so this mid-epoch checkpoint cannot resume at its batch "
                        "position: the resumed epoch will read this loader from its start",
                        InexactResumeWarning,
                        stacklevel=2,
                    )
        self.progress._count_since(self.progress._checkpoint_save_seconds, began)
        return {"progress": self.progress.state_dict(), "train_loaders": loaders, "rng": compact_rng(saved_rng)}

    def gathered_state_dict(self, *, epoch_ended: bool = False, before_build: bool = False) -> dict[str, Any]:
        """Collective: on rank 0 :meth:`state_dict` plus ``"ranks"``, every rank's entry (also in a world of one);
        elsewhere :meth:`state_dict` (docs/distributed.md)."""
        mine = self.state_dict(epoch_ended=epoch_ended, before_build=before_build)
        began = _clock.now_us()
        ranks = gather_to_writer(mine)
        self.progress._count_since(self.progress._checkpoint_save_seconds, began)  # in the next checkpoint's entry
        return mine if ranks is None else {**ranks[0], "ranks": ranks}

    def checkpoint_state_dict(self, *, epoch_ended: bool = False, before_build: bool = False) -> dict[str, Any]:
        """The entry to store in a checkpoint: :meth:`gathered_state_dict` (collective) when several processes run
        or a train loader is sharded across ranks (so another world size can map it), else :meth:`state_dict`."""
        if world()[0] > 1 or any(position.distributed_info() is not None for position in self._loaders.values()):
            return self.gathered_state_dict(epoch_ended=epoch_ended, before_build=before_build)
        return self.state_dict(epoch_ended=epoch_ended, before_build=before_build)

    def train_iterators_building(self) -> None:
        """The framework is about to build the iterators of the train loaders. Resumed inside an epoch (see
        :meth:`train_iterators_built`), the global RNGs put back after the build are those of now, so a reseed since
        the load stays (without it: those the load left); a save with ``before_build`` holds the RNGs of now. Call it
        right before the build, after the user's code."""
        self._rng_before_build = GlobalRng.capture()
        for position in self._loaders.values():
            position.iterator_building()

    def train_iterators_built(self, *, prefetched: bool = False) -> None:
        """The framework built the iterators of the train loaders whose state it restored, resuming inside an epoch,
        before its first batch: their builds' draws are undone (the global RNGs put back as at the load or at
        :meth:`train_iterators_building`, the order generators as the load left them). ``prefetched``: it fetched a
        batch too, whose draws stay (the global RNGs are not put back). A loader not built: the framework dropped the
        state it restored, nothing is put back. Nothing once a train batch began since the load (docs/adapters.md)."""
        if self._resumed_epoch_unbegun():
            for position in self._loaders.values():
                position.iterator_built(prefetched)

    def _resumed_epoch_unbegun(self) -> bool:
        """A load resumed the train loaders and no train batch began since."""
        loaded = self._loaded
        return loaded is not None and self.progress.train.view.batches.lifetime.ready == loaded.batches_ready

    def forget_loaded_positions(self) -> None:
        """The framework begins a new run instead of resuming the loaded one: no loader replays the loaded epoch."""
        self._pending.clear()
        self._undo = None
        self._loaded = None
        for position in self._loaders.values():
            position.forget_replay()

    def load_state_dict(self, entry: object) -> None:
        """Resume from an entry: validate all of it (a :class:`ProgressStateError` changes nothing), then load
        progress and RNGs and arm the loaders (those registered later: in :meth:`track_train_loader`). A gathered
        entry gives this rank its part, mapped from another world size."""
        began = _clock.now_us()
        loaded = self._parse_entry(entry)
        # A loader part waiting for its loader (registered after the load) is checked then: keep what to undo.
        pending = {index: part for index, part in loaded.parts.items() if index not in loaded.ready}
        undo = None
        if pending:
            undo = _Undo(
                parse(self.progress.state_dict()),
                GlobalRng.capture(),
                self.progress._resume_mapping,
                (self._pending, self._undo, self._loaded),
            )
        self._undo = undo
        self.progress._load_parsed(loaded.progress)
        loaded.rng.apply()
        for position, parsed in loaded.ready.values():
            if undo is not None:
                undo.put_back.append(position.undo_point())
            position.arm(parsed)
        self._pending = pending
        self._loaded = _LoadedParts(loaded.parts, self.progress.train.view.batches.lifetime.ready)
        self.progress._resume_mapping = loaded.mapping
        self.progress._count_since(self.progress._checkpoint_restore_seconds, began)
        for problem in loaded.problems:
            warnings.warn(problem, InexactResumeWarning, stacklevel=2)

    def resume_loaded_again(self) -> bool:
        """Arm the train loaders registered next at the positions of the last :meth:`load_state_dict`
        (docs/adapters.md). False, changing nothing, if nothing was loaded or a train batch began since."""
        loaded = self._loaded
        if loaded is None or not self._resumed_epoch_unbegun():
            return False
        self._pending = dict(loaded.parts)
        self._undo = None
        return True

    def load_for_evaluation(self, entry: object) -> None:
        """:meth:`load_state_dict` for a run that trains nothing: saved at another world size, rank ``r`` loads
        saved rank ``r % W``'s progress and RNGs as they are; errors name keys under ``ranks.<i>``."""
        if not saved_elsewhere(entry):
            self.load_state_dict(entry)
            return
        ranks = entry["ranks"]  # type: ignore[index]
        source = world()[1] % len(ranks)
        with keys_under(f"ranks.{source}"):
            self.load_state_dict(ranks[source])

    def _undo_load(self, undo: _Undo) -> None:
        """A loaded loader part does not fit its loader: put back what the load changed."""
        self.progress._load_parsed(undo.progress)
        self.progress._resume_mapping = undo.mapping
        undo.rng.apply()
        for put_back in undo.put_back:
            put_back()
        self._pending, self._undo, self._loaded = undo.parts

    def validate_state_dict(self, entry: object) -> None:
        """Raise the :class:`ProgressStateError` that :meth:`load_state_dict` would raise (checked against the
        registered train loaders); change nothing, global RNGs included, and warn about nothing."""
        self._parse_entry(entry)

    def _parse_entry(self, entry: object) -> _LoadedEntry:
        # Bounded before anything recurses over it; of "ranks", ``select`` checks only the parts it reads.
        if isinstance(entry, dict) and "ranks" in entry:
            check_plain({n: v for n, v in entry.items() if n != "ranks"})
            selected = select(read_mapping(entry, "", required=(*ENTRY_KEYS, "ranks"))["ranks"], self._loaders)
        else:
            check_plain(entry)
            selected = Selected(dict(read_mapping(entry, "", required=ENTRY_KEYS)), None, [], "")
        entry = selected.entry
        problems = [f"elastic resume: {problem}" for problem in selected.problems]
        with keys_under(selected.key_prefix):
            with keys_under("progress"):
                parsed_progress = parse(entry["progress"])
            with keys_under("rng"):
                rng = GlobalRng.from_plain(entry["rng"])
            states = entry["train_loaders"]
            if not isinstance(states, list) or not all(isinstance(s, dict) for s in states):
                raise ProgressStateError("train_loaders", "expected a list of dicts")
            if len(states) < parsed_progress.train_dataloaders:  # state_dict() saves one per counted loader
                raise ProgressStateError(
                    "train_loaders",
                    f"{len(states)} loader states, but the progress counts {parsed_progress.train_dataloaders} loaders",
                )
            resume_epoch = reenters_train_epoch(parsed_progress.train_epochs)
            ready = {}
            parts = {}
            for index, saved in enumerate(states):
                with keys_under(f"train_loaders.{index}"):
                    if saved.get("kind") == "untracked":
                        read_mapping(saved, "", required=("kind",))
                        if resume_epoch and index < parsed_progress.train_dataloaders:
                            problems.append(
                                f"train dataloader {index} was not a torch DataLoader when saved: "
                                "the resumed epoch reads it from its start"
                            )
                        continue
                    # all of it that needs no loader, also for loaders registered later
                    checked = check_saved_loader(saved, "")
                    parts[index] = (checked, resume_epoch)
                    position = self._loaders.get(index)
                    if position is not None:
                        ready[index] = (position, position.check(checked, resume_epoch))
        return _LoadedEntry(parsed_progress, rng, ready, parts, selected.mapping, problems)


@dataclasses.dataclass
class _Undo:
    """What a load changed, kept until every loader part it left waiting found its loader and fits it."""

    progress: Parsed  # the progress before the load
    rng: GlobalRng  # the global RNGs before the load
    mapping: dict[str, Any] | None  # the resume mapping before the load
    # The tracker's loaded parts before the load: _pending, _undo, _loaded.
    parts: tuple[dict[int, tuple[SavedLoader, bool]], _Undo | None, _LoadedParts | None]
    # Each loader the load armed: the call that puts it back as before the load.
    put_back: list[Callable[[], None]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class _LoadedParts:
    """The loader parts of the last load, which :meth:`Tracker.resume_loaded_again` arms again."""

    parts: dict[int, tuple[SavedLoader, bool]]  # (state, resume_epoch) per tracked loader
    batches_ready: int  # lifetime train batches begun right after the load


@dataclasses.dataclass(frozen=True)
class _LoadedEntry:
    """A validated entry, ready to apply."""

    progress: Parsed
    rng: GlobalRng
    ready: dict[int, tuple[LoaderPosition, ParsedLoader]]  # loaders registered now
    parts: dict[int, tuple[SavedLoader, bool]]  # every tracked loader's (state, resume_epoch)
    mapping: dict[str, Any] | None
    problems: list[str]  # why the resume will not be exact (InexactResumeWarning)
