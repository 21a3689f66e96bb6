"""Per-dataloader counts of a step that reads several dataloaders at once (a combined batch)."""

from __future__ import annotations

from collections.abc import Sequence

from tracker_core.counting._stage import StageProgress


def count_combined_batch(
    stage: StageProgress, parts: Sequence[tuple[int, int]], passes: Sequence[int | None] = ()
) -> None:
    """The batch just processed (one step reading several dataloaders: Lightning's ``CombinedLoader``) also held,
    per ``(dataloader, samples)`` of ``parts``, a batch of ``samples`` samples from that dataloader. ``passes``: each
    dataloader's batches per pass (None: unknown); a shorter one starting over restarts its epoch-scope counts."""
    for dataloader, samples in parts:
        stage._count_samples(samples, dataloader)
    for tallies, batches in zip(stage._dataloaders, passes, strict=False):
        if batches is not None and tallies.batches.total - tallies.batches.epoch_base >= batches:
            tallies.batches.begin_epoch()
            tallies.samples.begin_epoch()
