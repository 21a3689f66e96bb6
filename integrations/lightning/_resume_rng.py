"""The global-RNG checks of a resumed fit (``ResumeRngCheck``) where Lightning's order of iterator builds, hooks and
batches allows them, and the draws of an early iterator build undone."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING

from tracker_core import InexactResumeWarning
from tracker_core.adapter import GlobalRng, ResumeRngCheck
from tracker_core.integrations.lightning import _compat as resume
from tracker_core.integrations.lightning._resume_warnings import warn_validation_built_at_restart

if TYPE_CHECKING:
    import pytorch_lightning as pl

_SEED_BEFORE = "Trainer.fit(ckpt_path=...)"  # where a resumed fit's RNGs are restored (the RNG check's advice)
_AT_TRAIN_START = "in an on_train_start hook of the resumed fit, before its first batch"
_AT_EPOCH_BOUNDARY = (
    "in an on_train_start or on_train_epoch_start hook of a fit resumed at an epoch boundary (Lightning built "
    "that epoch's train iterator, which draws from it, before these hooks; the uninterrupted run builds it "
    "after them, so even a draw both runs make there differs: draw per-epoch values from a torch.Generator "
    "of your own)"
)


class ResumeRngChecks:
    """The checks of the RNGs a fit's load restored, from the load to the first batch Lightning runs."""

    def __init__(self) -> None:
        self.at_setup: GlobalRng | None = None  # after a load, before Lightning's setup_data iter()
        self._check: ResumeRngCheck | None = None  # a fit loaded: the RNGs it restored, until compared
        self._epoch = 0  # the epoch the checks below are for (Lightning may go on with the next one)
        self._where = ""  # what the check after the start hooks names
        self._generators: tuple[str, ...] = ResumeRngCheck.GENERATORS  # those it compares (see _hooks_over)
        self.setup(None)

    def setup(self, trainer: pl.Trainer | None) -> None:
        """A new call on ``trainer``: forget the checks a resumed fit that trained nothing left."""
        self._trainer: Callable[[], pl.Trainer | None] = nothing if trainer is None else weakref.ref(trainer)
        self._at_run: ResumeRngCheck | None = None  # compared once the start hooks are over
        self._at_start: ResumeRngCheck | None = None  # mid-epoch: set up at on_train_start
        self._boundary = False  # resumed at an epoch boundary: its check is set up at on_train_start
        self._await_build = False  # a check waits for Lightning's setup_data to build the train iterator
        self._built: GlobalRng | None = None  # epoch boundary: the RNGs as that build (and prefetch) left them
        # the train iterator it built (that epoch must read from it), held weakly: Lightning drops it, and its workers
        self._built_iterator: Callable[[], object] = nothing
        self._restarts = False  # mid-epoch, a plain loader's epoch is read from its start (see await_build)
        self.after_cut: GlobalRng | None = None  # loaded inside a validation batch: see validation_ended
        # Lightning builds a validation iterator at the resumed epoch's first batch: the epoch closed, the RNGs before
        self._validation_build: tuple[int, GlobalRng | None] | None = None

    def __getstate__(self) -> dict[str, object]:
        """Without the trainer (``ProgressTracker.__getstate__``)."""
        return {**self.__dict__, "_trainer": nothing}

    def loaded(self) -> None:
        """A fit's entry was loaded: remember the RNGs it restored."""
        self._check = ResumeRngCheck(load=_SEED_BEFORE)
        self._check.loaded()

    def undo_loader_builds(self, loaders: list[object]) -> None:
        """A fit loaded, its train ``loaders`` set up: if only their builds' draws moved the RNGs since the load (a
        ``StatefulDataLoader(shuffle=True)`` built in ``train_dataloader()``), undo them, as the uninterrupted run
        made them before its checkpoint."""
        check = self._check
        loaded = None if check is None else check.loaded_state
        if check is not None and loaded is not None and check.drew_only(sum(map(resume.has_own_state, loaders))):
            loaded.apply()

    def before_first_iter(self) -> ResumeRngCheck | None:
        """Lightning is about to build the resumed run's train iterator: compare, and remember the RNGs as now."""
        check, self._check = self._check, None
        if check is not None:
            check.check(
                "between the checkpoint load and Lightning's first train iterator (configure_optimizers, on_fit_start, "
                "train_dataloader())"
            )
        self.at_setup = GlobalRng.capture()
        return check

    def await_build(
        self, check: ResumeRngCheck | None, continues_epoch: int | None, finished: bool, restarts: bool = False
    ) -> None:
        """Set ``check`` up for the iterator Lightning builds next: continuing epoch ``continues_epoch`` (None: the next
        epoch) unless nothing trains (``finished``); ``restarts``: a plain loader's epoch is read anew: that draws."""
        if check is None or not check.armed:
            return
        self._restarts = restarts and continues_epoch is not None
        if continues_epoch is not None:  # nothing draws before its first batch: compared after the start hooks
            self._epoch = continues_epoch
            self._at_start = check
            self._await_build = True
        elif not finished:
            self._boundary = True  # Lightning's iterator of the next epoch drew: see arm_first_batch_check
            self._await_build = True  # Lightning builds it right after this returns

    def setup_data_returned(self) -> None:
        """Lightning's ``setup_data`` returned: first with the resumed run's train iterator built (a batch
        prefetched), no hook run since; next between the ``on_train_start`` and ``on_train_epoch_start`` hooks."""
        trainer = self._trainer()
        if trainer is None:
            return
        if self._validation_build is not None:  # the last call before that build
            self._validation_build = (self._validation_build[0], GlobalRng.capture())
        self._hooks_over(trainer)
        if not self._await_build:
            return
        self._await_build = False
        built = resume.train_iterator(trainer.fit_loop)
        self._built_iterator = nothing if built is None else weakref.ref(built)
        if self._boundary:
            self._built = GlobalRng.capture()
        check = self._at_start
        if check is not None and self._restarts:  # the restarted epoch's new iterator drew (its inexactness warned)
            check.loaded()  # a reseed in an on_train_start hook is compared from here
        elif check is not None and check.moved_since(GlobalRng.capture()):
            self._at_start = None  # a loader with its own state drew nothing: only the prefetch drew since the load
            warnings.warn(
                "a train dataloader without a length drew from the global RNG in the main process when Lightning "
                "prefetched the first batch of the resumed epoch: the saved run had prefetched that batch before "
                "its checkpoint, with the draws in the checkpoint's RNG state, so the resumed run's data and random "
                "draws differ from the uninterrupted run. Keep main-process loading free of global-RNG draws (draw "
                "in worker processes, num_workers > 0)",
                InexactResumeWarning,
                stacklevel=2,
            )

    def train_epoch_start(self, trainer: pl.Trainer) -> None:
        """At an epoch boundary: compare what the iterator drew from after the ``on_train_epoch_start`` hooks of the
        callbacks before the tracker. If Lightning builds this epoch's iterator anew: undo the early one's draws."""
        check, self._at_run = self._at_run, None
        if check is not None and trainer.current_epoch == self._epoch:
            check.check(self._where, last=True, generators=self._generators)
        if self.at_setup is not None and resume.discards_setup_iterator(trainer):
            self.undo_setup_draws()
        self.at_setup = None

    def await_validation_build(self, epoch: int) -> None:
        """``on_train_start`` of a fit resumed at the last batch of ``epoch``, which Lightning closed: it builds a
        validation iterator at the next epoch's first batch, one global-RNG draw (``validation_built_at_restart``)."""
        self._validation_build = (epoch, None)

    def train_batch_start(self) -> None:
        """A train batch starts: the draws of Lightning's setup_data iterator stand; the draw of a validation iterator
        built before the resumed run's first batch is undone where nothing else drew since, else warned."""
        self.at_setup = None
        build, self._validation_build = self._validation_build, None
        epoch, before = (0, None) if build is None else build
        if before is None:
            return
        check = ResumeRngCheck(load=_SEED_BEFORE)
        check.loaded(before)
        if check.drew_only(1):  # the uninterrupted run builds none there
            before.apply()
        elif check.moved_since(GlobalRng.capture()):
            warn_validation_built_at_restart(epoch)

    def undo_setup_draws(self) -> None:
        """A resumed fit ended before a batch read the iterator Lightning built in setup_data: undo its draws."""
        if self.at_setup is not None:
            rng, self.at_setup = self.at_setup, None
            rng.apply()

    def validation_ended(self) -> None:
        """The validation a checkpoint cut ended: the RNGs go back to those loaded (its re-read drew from them)."""
        rng, self.after_cut = self.after_cut, None
        if rng is not None:
            rng.apply()
            if self.at_setup is not None:  # Lightning may still drop its setup_data iterator: back to these
                self.at_setup = rng

    def arm_first_batch_check(self, trainer: pl.Trainer) -> None:
        """The resumed fit's ``on_train_start``: compare the global RNGs now and again once the start hooks are over
        (docs/lightning.md, "How resume works": "Where the start hooks are compared")."""
        check, self._at_start = self._at_start, None
        boundary, self._boundary = self._boundary, False
        built, self._built = self._built, None
        if check is not None:
            if trainer.current_epoch != self._epoch or check.check(_AT_TRAIN_START):
                return
            self._where = _AT_TRAIN_START
            self._generators = ResumeRngCheck.GENERATORS
        elif boundary and self.at_setup is not None:
            check = ResumeRngCheck(load=_SEED_BEFORE)
            if built is not None:  # nothing of the user's ran since the build but on_train_start hooks before this
                check.loaded(built)
                if check.check(_AT_TRAIN_START):
                    return
            check.loaded()
            self._where = _AT_EPOCH_BOUNDARY
            self._generators = check.moved_since(self.at_setup)  # those the iterator drew from
        else:
            return
        self._epoch = trainer.current_epoch
        self._at_run = check

    def _hooks_over(self, trainer: pl.Trainer) -> None:
        """Lightning's ``setup_data`` call at the epoch's start: after every ``on_train_start`` hook, before the
        ``on_train_epoch_start`` hooks (none mid-epoch) and the first batch. Not if Lightning has gone on with the next
        epoch or builds a new train iterator for this one (their draws are the uninterrupted run's too)."""
        check, self._at_run = self._at_run, None
        if check is None or trainer.current_epoch != self._epoch or resume.discards_setup_iterator(trainer):
            return
        if resume.train_iterator(trainer.fit_loop) is not self._built_iterator():
            return
        # at an epoch boundary, a draw of the generators the iterator did not draw from is exact in on_train_epoch_start
        others = tuple(name for name in ResumeRngCheck.GENERATORS if name not in self._generators)
        if check.check(_AT_TRAIN_START, generators=others) or check.check(self._where, generators=self._generators):
            return
        self._at_run = check  # again at the tracker's on_train_epoch_start, after those of the callbacks before it


def nothing() -> None:
    """What a weak reference to no object returns."""
