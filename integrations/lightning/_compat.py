"""Every private attribute of Lightning the adapter touches, in one place, checked when imported: what Lightning's
restart logic will do with a checkpoint (read from its restored loop counters), and the hook before its first ``iter()``."""

from __future__ import annotations

from collections.abc import Callable

import pytorch_lightning as pl
from pytorch_lightning.loops.fit_loop import _FitLoop
from pytorch_lightning.loops.training_epoch_loop import _TrainingEpochLoop
from torch.utils.data import DataLoader

from tracker_core.integrations._extra import check_attributes


def on_train_batch_end(trainer: pl.Trainer) -> bool:
    """True inside ``on_train_batch_end`` hooks (Lightning marked the batch processed, not completed)."""
    current = trainer.fit_loop.epoch_loop.batch_progress.current
    return current.ready == current.started == current.processed == current.completed + 1


def validation_due(trainer: pl.Trainer) -> bool:
    """True if a validation follows the batch now ending (Lightning skips it when resuming from here)."""
    fit_loop = trainer.fit_loop
    fetcher = fit_loop._data_fetcher
    return fetcher is not None and fit_loop.epoch_loop._should_check_val_fx(fetcher)


def discards_setup_iterator(trainer: pl.Trainer) -> bool:
    """In ``on_train_epoch_start``: True if Lightning builds a new train iterator for this epoch.

    After a restart it otherwise keeps iterating the one built in ``setup_data``
    (``_TrainingEpochLoop.on_run_start``).
    """
    fit_loop = trainer.fit_loop
    return trainer.current_epoch > 0 and not fit_loop.is_resuming and not fit_loop.epoch_loop.restarting


def restored_epoch_consumed(fit_loop: _FitLoop) -> bool:
    """True if the restored train epoch had fetched its last batch: Lightning will not read it further."""
    return fit_loop.restarting and fit_loop.epoch_loop.batch_progress.is_last_batch


def closes_restored_epoch(fit_loop: _FitLoop) -> bool:
    """True if Lightning will count the restored train epoch as finished without running its end.

    That is its reading of a checkpoint saved in ``on_train_batch_end`` of an epoch's last
    batch (``_FitLoop.reset``): it increments the epoch counters and starts the next epoch.
    """
    epochs = fit_loop.epoch_progress.total
    batches = fit_loop.epoch_loop.batch_progress
    total = batches.total
    return (
        fit_loop.restarting
        and epochs.started == epochs.ready
        and epochs.processed == epochs.started - 1
        and epochs.completed == epochs.processed
        and total.started == total.ready == total.processed == total.completed + 1
        and batches.is_last_batch
    )


def hook_before_first_iter(fit_loop: _FitLoop, before: Callable[[list[object]], None]) -> None:
    """Call ``before(train_loaders)`` each time Lightning set up the train loaders, before its ``iter()``.

    Lightning builds the first epoch's iterator inside ``_FitLoop.setup_data``, before any
    train hook runs, right after ``_load_combined_loader_states``: that method is wrapped on
    this loop instance. When every train loader is a torch DataLoader (tracked by the core),
    Lightning's own restore of resumable loaders is dropped: the core's position wins.
    """
    if getattr(fit_loop._load_combined_loader_states, "_progress_tracker", False):
        return
    original = fit_loop._load_combined_loader_states

    def _load_combined_loader_states() -> None:
        combined = fit_loop._combined_loader
        if combined is not None:
            loaders = list(combined.flattened)
            before(loaders)
            if all(isinstance(loader, DataLoader) for loader in loaders):
                fit_loop._combined_loader_states_to_load = []
        original()

    _load_combined_loader_states._progress_tracker = True  # type: ignore[attr-defined]
    fit_loop._load_combined_loader_states = _load_combined_loader_states  # type: ignore[method-assign]


check_attributes(
    "pytorch-lightning",
    pl.__version__,
    {
        "_FitLoop": (
            _FitLoop,
            ("_load_combined_loader_states", "_combined_loader", "_combined_loader_states_to_load", "_data_fetcher"),
        ),
        "_TrainingEpochLoop": (_TrainingEpochLoop, ("_should_check_val_fx",)),
    },
)
