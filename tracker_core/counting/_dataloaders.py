"""Per-dataloader counts of a step that reads several dataloaders at once (a combined batch)."""

from __future__ import annotations

from tracker_core.counting._stage import StageProgress


def count_dataloader_batch(stage: StageProgress, dataloader: int, samples: int) -> None:
    """The batch just processed (``batch_processed``) also held a batch of ``samples`` samples from dataloader
    number ``dataloader``: count it in that dataloader's tallies and the stage's samples.

    For frameworks whose one step reads one batch of each of several dataloaders (Lightning's
    ``CombinedLoader``): the stage counts one batch, each dataloader its own.
    """
    stage._count_samples(samples, dataloader)


def begin_dataloader_pass(stage: StageProgress, dataloader: int) -> None:
    """Dataloader number ``dataloader`` starts over within the stage's epoch (Lightning's ``CombinedLoader``
    cycles a shorter loader): its epoch-scope counts restart, so they say how far it is through this pass."""
    tallies = stage._dataloader(dataloader)
    tallies.batches.begin_epoch()
    tallies.samples.begin_epoch()
