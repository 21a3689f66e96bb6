"""Resume a Lightning checkpoint saved at another world size, once Lightning has built the train loaders the core
maps the position onto (docs/lightning.md, "Elastic resume")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracker_core import ProgressStateError, Tracker

if TYPE_CHECKING:
    import pytorch_lightning as pl

_HINT = (
    "; with Lightning, resume under a distributed strategy (Trainer(strategy='ddp'), also with devices=1): it injects "
    "a DistributedSampler seeded with PL_GLOBAL_SEED (seed_everything; 0 when unset), shuffling as the loader does; "
    "or give the train DataLoader your own DistributedSampler(num_replicas=<world size>, rank=<rank>, seed=<as "
    "saved>, shuffle=<as saved>)"
)


def load(tracker: Tracker, entry: dict[str, Any], loaders: list[object], trainer: pl.Trainer) -> None:
    """Load ``entry`` mapped onto the registered ``loaders``, then move Lightning's batch counters to match.
    ``ProgressStateError``, nothing changed, where the core cannot map the position, or a restored epoch has several
    train loaders (Lightning counts one batch of each; the core maps each loader by its own samples)."""
    if len(loaders) > 1 and trainer.fit_loop.restarting:
        raise ProgressStateError(
            "ranks",
            f"a mid-epoch checkpoint saved at world size {len(entry['ranks'])} resumes at another world size "
            f"with one train dataloader only; this fit has {len(loaders)}",
        )
    try:
        tracker.load_state_dict(entry)
    except ProgressStateError as error:
        if "DistributedSampler" not in error.problem:
            raise
        raise ProgressStateError(error.key, error.problem + _HINT) from None
    mapping = tracker.view.resume_mapping
    if mapping is None or not mapping["train_loaders"]:
        return
    # shift Lightning's train batch counters (epoch and total, all phases) to the mapped position before its restart
    # logic reads them (_FitLoop.reset); the steps taken (global_step) stay
    progress: Any = trainer.fit_loop.epoch_loop.batch_progress
    shift = tracker.view.train.batches.epoch.processed - progress.current.processed
    for counts in (progress.total, progress.current):
        counts.ready += shift
        counts.started += shift
        counts.processed += shift
        counts.completed += shift
