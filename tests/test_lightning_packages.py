"""One callback and one progress bar for both Lightning packages: ``pytorch_lightning`` and ``lightning.pytorch``."""

from __future__ import annotations

import importlib
import io
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")

from tracker_core import get_progress
from tracker_core.integrations.lightning import ProgressDisplay, ProgressTracker

from helpers.lightning_matrix import PACKAGES, Config, model, trainer
from helpers.lightning_oracle import Oracle
from helpers.lightning_program import loader

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


@pytest.mark.parametrize("package", PACKAGES)
def test_the_callback_and_the_bar_are_subclasses_of_the_packages_own_classes(package: str) -> None:
    pl = importlib.import_module(package)
    assert issubclass(ProgressTracker, pl.Callback)
    assert issubclass(ProgressDisplay, pl.callbacks.ProgressBar)


@pytest.mark.parametrize("package", PACKAGES)
def test_the_bar_replaces_the_trainers_own_bar(package: str) -> None:
    config = Config(package=package, max_epochs=1)
    bar = ProgressDisplay(stream=io.StringIO(), terminal=False)
    oracle = Oracle()
    fit = trainer(config, [ProgressTracker(), bar, oracle], enable_progress_bar=True)
    fit.fit(model(config), loader())
    pl = importlib.import_module(package)
    assert [c for c in fit.callbacks if isinstance(c, pl.callbacks.ProgressBar)] == [bar]
    assert get_progress(fit).global_step == fit.global_step == 4
    assert oracle.disagreements == []


def test_lightning_cli_accepts_the_callback_by_class_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cli = importlib.import_module("lightning.pytorch.cli")
    demos = importlib.import_module("lightning.pytorch.demos.boring_classes")
    config = tmp_path / "config.yaml"
    config.write_text(
        "trainer:\n"
        "  accelerator: cpu\n"
        "  max_epochs: 1\n"
        "  limit_train_batches: 3\n"
        "  limit_val_batches: 1\n"
        "  logger: false\n"
        "  enable_checkpointing: false\n"
        "  enable_model_summary: false\n"
        f"  default_root_dir: {tmp_path}\n"
        "  callbacks:\n"
        "    - class_path: tracker_core.integrations.lightning.ProgressTracker\n"
        "    - class_path: tracker_core.integrations.lightning.ProgressDisplay\n"
        "      init_args:\n"
        "        terminal: false\n"
    )
    monkeypatch.setattr(sys, "argv", ["cli", "fit", "--config", str(config)])
    run: Any = cli.LightningCLI(demos.BoringModel, demos.BoringDataModule, save_config_callback=None)
    trackers = [c for c in run.trainer.callbacks if isinstance(c, ProgressTracker)]
    assert len(trackers) == 1
    assert get_progress(run.trainer).train.batches.run.completed == 3
