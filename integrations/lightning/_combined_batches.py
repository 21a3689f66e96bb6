"""Several train loaders (Lightning's ``CombinedLoader``): a step reads a batch of each; each loader counts its own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tracker_core.adapter import count_combined_batch, samples_in
from tracker_core.integrations.lightning._stage_driver import StageDriver

if TYPE_CHECKING:
    import pytorch_lightning as pl

TrainLayout = tuple[str, list[Any], list[int | None]]  # _compat.train_layout: mode, keys, each loader's batches


class CombinedBatches:
    """The fit's train loaders' layout (``_compat.train_layout``) and the combined batch in flight."""

    def __init__(self, layout: TrainLayout) -> None:
        self.layout = layout
        self.batch: Any = None  # the combined batch in flight

    def batch_end(self, train: StageDriver, batch: Any, trainer: pl.Trainer | None) -> None:
        """The step of ``batch`` ended: each loader with a part in it counts that part. In mode ``max_size_cycle`` a
        loader at its pass's end has started over already (Lightning prefetched): its epoch-scope counts restart."""
        if train.batch_to_complete:
            return  # a checkpoint caught this batch up already
        mode, keys, passes = self.layout
        parts = []
        for index, key in enumerate(keys):
            try:
                part = batch[key]
            except (KeyError, IndexError, TypeError):
                part = None
            if part is not None:  # mode max_size: an exhausted loader gives None
                parts.append((index, part))
        if not parts:
            train.batch_end(used=batch)
            return
        train.batch_end(*parts[0])
        stage = train.stage
        cycles = (  # a loader at its pass's end starts over, unless the epoch ends here
            mode == "max_size_cycle"
            and trainer is not None
            and stage.view.batches.epoch.processed < trainer.num_training_batches
        )
        count_combined_batch(stage, [(index, samples_in(part)) for index, part in parts[1:]], passes if cycles else ())
