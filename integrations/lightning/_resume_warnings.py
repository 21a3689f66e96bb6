"""The ``InexactResumeWarning``s of the Lightning callback: where a checkpoint or a resume makes Lightning run
differently from the uninterrupted run, and the record follows Lightning (docs/lightning.md, "Limits")."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from tracker_core import InexactResumeWarning, Tracker
from tracker_core.adapter import batches_in, reenter_evaluation_epoch
from tracker_core.integrations.lightning import _compat as resume

if TYPE_CHECKING:
    import pytorch_lightning as pl

    from tracker_core.integrations.lightning._combined_batches import TrainLayout


def warn_inexact_save(tracker: Tracker, trainer: pl.Trainer, layout: TrainLayout | None) -> None:
    """A fit checkpoint from which Lightning's resume runs differently from the uninterrupted run: say how."""
    train = tracker.view.train
    epochs, done = train.epochs.lifetime, train.batches.epoch.processed
    ended = epochs.ready == epochs.completed > 0 and done > 0  # after the fit: its last epoch is closed
    at_max_steps = resume.reached_max_steps(trainer)
    if ended and (at_max_steps or done < trainer.num_training_batches):
        # at max_steps Lightning's restart keeps the epoch's batch count; after a stop it begins the next epoch
        goes_on = f"goes on at batch {done} of" if at_max_steps else "trains all of"
        _inexact(
            f"checkpoint saved after a fit that ended ({'max_steps' if at_max_steps else 'a stop'}) at batch {done} "
            f"of epoch {epochs.completed - 1} (0-based): resuming from it, Lightning counts that epoch as finished "
            f"and {goes_on} epoch {epochs.completed}, so the resumed run's epochs and train data differ from the run "
            "that saved it from there"
        )
    if tracker.view.is_mid_epoch and layout is not None and layout[0] == "max_size_cycle":
        for index, batches in enumerate(layout[2]):
            if batches is not None and done >= batches:  # each step reads a batch of every loader
                _inexact(
                    f"train dataloader {index} of a CombinedLoader(mode='max_size_cycle') was read to its end in "
                    "this epoch and started over: the position of every loader resumes exactly, but Lightning's "
                    "resumed iterator forgets which loaders had ended and draws from the global RNG where the "
                    "uninterrupted run did not, so later random draws differ"
                )
            elif batches is None:
                _inexact(
                    f"train dataloader {index} of a CombinedLoader(mode='max_size_cycle') has no length, so where "
                    "it starts over within the epoch is unknown: this mid-epoch checkpoint may not resume its "
                    "position exactly"
                )
    if tracker.view.is_mid_epoch and resume.fetches_in_step(trainer):
        _inexact(
            "mid-epoch checkpoint of a training_step(dataloader_iter): the batch_idx that Lightning's iterator "
            "yields restarts at 0 when it resumes (and with accumulate_grad_batches > 1 Lightning zeroes and "
            "steps gradients by that count), so a step that uses it runs differently from an uninterrupted run"
        )
    if trainer.current_epoch > 0 and resume.in_train_epoch_start(trainer):
        _inexact(
            f"checkpoint saved in on_train_epoch_start of epoch {trainer.current_epoch} (0-based): resuming from it, "
            "Lightning counts that epoch as trained and goes on with the next, so the resumed run trains one epoch "
            "fewer than the run that saved it (save in on_train_epoch_end of the epoch before, or in a batch)"
        )
    for name in resume.acting_at_epoch_start(trainer) if tracker.view.is_mid_epoch else ():
        _inexact(
            f"mid-epoch checkpoint with a {name}, which acts in on_train_epoch_start: Lightning resumes inside the "
            "epoch without those hooks, so what it sets there for this epoch (a GradientAccumulationScheduler's "
            "accumulate_grad_batches, a BaseFinetuning's freezing and unfreezing) is not set, and the resumed run "
            "trains otherwise than the uninterrupted one, as without the tracker"
        )
    if tracker.view.is_mid_epoch and resume.plateau_at_epoch_end(trainer):
        _inexact(
            "mid-epoch checkpoint with a ReduceLROnPlateau stepped at each epoch's end: Lightning does not step it at "
            "the end of an epoch it resumed inside, so the resumed run's learning rate differs, as without the tracker"
        )
    if resume.on_train_batch_end(trainer) and resume.validation_due(trainer):
        _inexact(
            "checkpoint saved in on_train_batch_end before a due validation: Lightning skips that "
            "validation when resuming from it, so the resumed run will not validate there (its "
            "validation counts and any randomness the validation draws differ from an uninterrupted run)"
        )


def warn_saved_in_validation() -> None:
    _inexact(
        "checkpoint saved inside a validation: a fit resumed from it does not go on with that validation where it "
        "stopped (Lightning re-reads it from its first batch when saved inside a batch, or counts it finished when "
        "saved between batches), so that validation's batches and metrics differ from the uninterrupted run's "
        "(docs/lightning.md, Limits)"
    )


def warn_validation_built_at_restart(epoch: int, persistent: bool = False) -> None:
    """Lightning builds a validation iterator before the resumed run's first batch, whose draw the tracker cannot undo:
    others came after it (``ResumeRngChecks.train_batch_start``), or the loader keeps it (``persistent``)."""
    why = (
        "that loader's workers persist, so the validation of that epoch reuses the iterator instead of building it "
        "as the uninterrupted run does"
        if persistent
        else "other draws came after it before the batch (a shuffled DataLoader's sampler or the dataset without "
        "workers, an on_train_batch_start hook), so it cannot be undone"
    )
    _inexact(
        f"resumed from a checkpoint saved in on_train_batch_end at the last batch of epoch {epoch} (0-based), which "
        f"validated nothing, where epoch {epoch + 1} validates: Lightning's restart counts a validation as run at the "
        "first resumed batch and builds the validation dataloader's iterator there, drawing its base seed from the "
        f"global RNG where the uninterrupted run draws nothing; {why}, and the resumed run's data order and random "
        "draws may differ. Give each validation DataLoader a generator of its own (generator=torch.Generator()), or "
        "save in on_train_epoch_end (docs/lightning.md, Limits)",
        stacklevel=3,
    )


def warn_epoch_left_open(tracker: Tracker, trainer: pl.Trainer) -> None:
    epoch = tracker.view.epoch_index
    _inexact(
        f"resumed at max_steps={trainer.max_steps} inside epoch {epoch} (0-based): Lightning trains nothing more "
        f"and leaves that epoch open (current_epoch stays {epoch}), where a run that is not interrupted closes "
        f"it when it reaches max_steps (current_epoch {epoch + 1}); the record follows Lightning. Resumed with a "
        "larger max_steps, the run continues exactly"
    )


def warn_epoch_uncounted(tracker: Tracker, consumed: bool) -> None:
    """Resumed inside an epoch that Lightning's counters do not show (``Restart.no_epoch_counted``)."""
    epoch = tracker.view.epoch_index
    if consumed:
        tracker.progress.note_anomaly(f"Lightning runs train epoch {epoch} (0-based) again after a resume")
        what = (
            f"Lightning counts the epoch finished and runs the next one as epoch {epoch} again (one epoch more "
            "than an uninterrupted run)"
        )
    else:
        tracker.progress.note_anomaly(f"Lightning numbers train epoch {epoch}'s resumed batches from 0")
        what = (
            "Lightning numbers the epoch's remaining batches from batch_idx 0, so what depends on batch_idx "
            "(accumulate_grad_batches' optimizer steps among them) falls on other batches than in an "
            "uninterrupted run"
        )
    _inexact(
        f"the checkpoint was saved in epoch {epoch} (0-based) by a fit that was itself resumed at an epoch end, "
        f"whose Lightning loop counters show no epoch in flight: {what}; the record follows Lightning. A fit "
        "resumed mid-epoch saves correct counters again"
    )


def warn_continues_untrained() -> None:
    _inexact(
        "this fit continues, mid-epoch, a fit resumed from a checkpoint that trained nothing (max_steps "
        "reached): Lightning goes on with that epoch's batch counts, but the train data of this fit "
        "starts a new pass instead of resuming the checkpoint's position; fit(ckpt_path=...) with the "
        "larger max_steps resumes exactly"
    )


def warn_if_restored_ahead(loaders: list[object]) -> None:
    for index, loader in enumerate(loaders):
        if resume.has_own_state(loader) and batches_in(loader) is None:
            _inexact(
                f"train dataloader {index} has a state of its own, which Lightning restores, and no length: "
                "Lightning saved that state after the batch it had prefetched, so the resumed epoch skips it "
                "(give the loader's dataset a __len__, and Lightning does not prefetch)",
                stacklevel=4,
            )


def warn_restored_loaders(cut: int | None, loaders: list[object]) -> None:
    """Warned at save and resume, of the train loaders with a state of their own, which Lightning restores: train
    batch ``cut`` was fetched, its step not ended (None: no such batch); a sampler Lightning wrapped for DDP."""
    for index, loader in enumerate(loaders):
        if cut is not None and resume.has_own_state(loader):
            _inexact(
                f"checkpoint saved before the step of train batch {cut} of the epoch ended (in on_train_batch_start "
                f"or inside the step): train dataloader {index} has a state of its own, which Lightning saved after "
                "that batch and restores, so the resumed epoch skips it"
            )
        if resume.has_own_state(loader) and resume.wrapped_for_ddp(loader):
            _inexact(
                f"train dataloader {index} has a state of its own, and Lightning wrapped its sampler for DDP in a "
                "DistributedSamplerWrapper, which has none: a resume iterates the wrapper again, which draws the "
                "order of a shuffling sampler (StatefulDataLoader(shuffle=True)) again, so the resumed run reads "
                "other samples. Give the loader a DistributedSampler yourself, with "
                "Trainer(use_distributed_sampler=False)"
            )


def validation_at_load(tracker: Tracker, restart: str, progress: dict[str, Any]) -> bool:
    """A fit checkpoint saved inside a validation: the record follows Lightning's ``restart`` of it (``"finish"``,
    counting on from the batches done, or ``"skip"`` the rest; "": nothing to follow). True: it finishes it."""
    if not restart or not reenter_evaluation_epoch(tracker.progress, "validate", progress):
        return False
    if restart == "finish":
        return True  # Lightning finishes it: see warn_validation_reread
    validate = tracker.progress.validate
    validate.epoch_processed()
    validate.epoch_completed()
    done = tracker.view.validate.batches.epoch.completed
    message = (
        f"checkpoint saved during a validation after {done} of its batches: Lightning resumes training "
        "without running the rest of that validation (it counts it as finished); the record counts the "
        f"{done} batches that ran"
    )
    tracker.progress.note_anomaly(message)
    _inexact(message, stacklevel=2)
    return False


def warn_validation_reread(tracker: Tracker) -> None:
    """Loaded inside a validation batch; the caller puts the RNGs loaded now back when that validation ends."""
    message = (
        "resumed inside a validation batch: Lightning finishes that validation re-reading its data from the "
        "first batch of its first loader, so its batches and metrics differ from the uninterrupted run's; the "
        "training after it continues exactly only if that validation made no global random draw after the "
        "checkpoint in the uninterrupted run (its last loader's iterator was already built)"
    )
    tracker.progress.note_anomaly(message)
    _inexact(message, stacklevel=2)


def _inexact(message: str, stacklevel: int = 3) -> None:
    """Warn ``InexactResumeWarning``, ``stacklevel`` counted from the caller."""
    warnings.warn(message, InexactResumeWarning, stacklevel=stacklevel + 1)
