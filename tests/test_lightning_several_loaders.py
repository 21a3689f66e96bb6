"""Several train loaders in one Lightning epoch (issue 13, item 16): in each ``CombinedLoader`` mode ``fit`` accepts,
the view and the checkpoint keep each loader's progress, and a mid-epoch resume is exact without a warning."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pytorch_lightning")

from tracker_core import Progress

from helpers.lightning_matrix import Config, run

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

# loaders of 10 and 7 samples in batches of 3: 4 and 3 batches a pass; 2 epochs
LIFETIME_BATCHES = {"max_size_cycle": (8, 8), "min_size": (6, 6), "max_size": (8, 6)}


@pytest.mark.parametrize("mode", LIFETIME_BATCHES)
def test_each_train_loader_keeps_its_own_progress_and_a_mid_epoch_resume_is_exact(mode: str, tmp_path: Path) -> None:
    config = Config(train_sizes=(10, 7), combined_mode=mode, resume_at=1)  # saved after the second step
    outcome = run(config, tmp_path)
    assert outcome.disagreements == []
    assert outcome.adapter_errors == []
    assert outcome.inexact_warnings == []
    assert outcome.exact  # sample ids, weights and the whole progress (each loader's counts) as uninterrupted
    resumed = Progress()
    resumed.load_state_dict(outcome.progress)
    loaders = resumed.view.train.dataloaders
    assert tuple(loader.batches.lifetime for loader in loaders) == LIFETIME_BATCHES[mode]
