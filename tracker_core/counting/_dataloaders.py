"""Per-dataloader counts of a step that reads several dataloaders at once (a combined batch)."""

from __future__ import annotations

from collections.abc import Sequence

from tracker_core.counting._stage import StageProgress


def count_combined_batch(
    stage: StageProgress, parts: Sequence[tuple[int, int]], passes: Sequence[int | None] = ()
) -> None:
    """The batch just processed (``batch_processed``) also held, for each ``(dataloader, samples)`` of ``parts``, a
    batch of ``samples`` samples from dataloader number ``dataloader``: count each in that dataloader's tallies and
    the stage's samples.

    For frameworks whose one step reads one batch of each of several dataloaders (Lightning's
    ``CombinedLoader``): the stage counts one batch, each dataloader its own. ``passes``: each dataloader's
    batches per pass (None: unknown) where a shorter one starts over within the stage's epoch (Lightning's
    ``CombinedLoader`` cycles it): a dataloader that has read its pass begins the next, its epoch-scope counts
    restarting, so they say how far it is through this pass.
    """
    for dataloader, samples in parts:
        stage._count_samples(samples, dataloader)
    for tallies, batches in zip(stage._dataloaders, passes, strict=False):
        if batches is not None and tallies.batches.total - tallies.batches.epoch_base >= batches:
            tallies.batches.begin_epoch()
            tallies.samples.begin_epoch()
