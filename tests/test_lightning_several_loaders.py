"""Several train loaders in one Lightning epoch (issue 13, item 16): in each ``CombinedLoader`` mode ``fit`` accepts,
the view and the checkpoint keep each loader's progress, and a mid-epoch resume of StatefulDataLoaders is exact without
a warning."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("torchdata")

from tracker_core import Progress

from helpers.lightning_matrix import Config, run

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

# loaders of 10 and 7 samples in batches of 3: 4 and 3 batches a pass; 2 epochs
LIFETIME_BATCHES = {"max_size_cycle": (8, 8), "min_size": (6, 6), "max_size": (8, 6)}


@pytest.mark.parametrize("mode", LIFETIME_BATCHES)
def test_each_train_loader_keeps_its_own_progress_and_a_mid_epoch_resume_is_exact(mode: str, tmp_path: Path) -> None:
    # saved after the second step; Lightning restores each StatefulDataLoader's own state
    config = Config(train_sizes=(10, 7), combined_mode=mode, resume_at=1, stateful=True)
    outcome = run(config, tmp_path)
    assert outcome.disagreements == []
    assert outcome.adapter_errors == []
    assert outcome.inexact_warnings == []
    assert outcome.exact  # sample ids, weights and the whole progress (each loader's counts) as uninterrupted
    resumed = Progress()
    resumed.load_state_dict(outcome.progress)
    loaders = resumed.view.train.dataloaders
    assert tuple(loader.batches.lifetime for loader in loaders) == LIFETIME_BATCHES[mode]


def test_a_train_loader_without_a_length_among_several_trains_as_without_the_tracker() -> None:
    import torch
    from pytorch_lightning import LightningModule, Trainer
    from pytorch_lightning.utilities import CombinedLoader
    from torch.utils.data import DataLoader, IterableDataset

    from tracker_core.integrations.lightning import ProgressTracker

    class Stream(IterableDataset[torch.Tensor]):  # no __len__: DataLoader's len() raises TypeError
        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter(torch.ones(6, 4))

    class Model(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
            return sum(self.layer(part).sum() for part in batch)  # type: ignore[return-value]

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self) -> CombinedLoader:
            loaders = [DataLoader(torch.ones(8, 4), batch_size=2), DataLoader(Stream(), batch_size=2)]
            return CombinedLoader(loaders, "min_size")

    tracker = ProgressTracker()
    trainer = Trainer(
        max_epochs=1,
        callbacks=[tracker],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(Model())
    assert trainer.global_step == 3
    assert tracker.tracker.view.train.batches.run.completed == 3
