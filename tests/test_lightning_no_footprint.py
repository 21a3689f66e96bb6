"""The Lightning callback leaves no footprint (issue 13, item 12): an uninterrupted fit with ProgressTracker trains
bit-identically to the same fit without it: weights, sample order and the global RNG stream, with noise drawn from
the global RNG in every step (like dropout), shuffled data and a validation between epochs."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")

import torch
from torch.utils.data import DataLoader

from tracker_core.integrations.lightning import ProgressTracker

from helpers.lightning_matrix import PACKAGES, Config, model, trainer
from helpers.lightning_program import Indexed

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _names_left(root: Path, config: Config, callbacks: list[Any], logged: bool) -> list[str]:
    """Every file and folder under ``root`` after a fit saving a checkpoint at every step, relative to ``root``."""
    package = importlib.import_module(config.package)
    saver = package.callbacks.ModelCheckpoint(every_n_train_steps=1, save_top_k=-1)
    logger = package.loggers.CSVLogger(root) if logged else False
    torch.manual_seed(0)
    overrides = {"default_root_dir": root, "enable_checkpointing": True, "logger": logger}
    trainer(config, [*callbacks, saver], **overrides).fit(model(config), DataLoader(Indexed(10), batch_size=3))
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


def _fit(config: Config, callbacks: list[Any]) -> tuple[list[list[int]], list[torch.Tensor], torch.Tensor]:
    torch.manual_seed(0)
    module = model(config)
    train = DataLoader(Indexed(10), batch_size=3, shuffle=True)
    validation = DataLoader(Indexed(7), batch_size=3, shuffle=True)
    trainer(config, callbacks).fit(module, train, validation)
    return module.seen, [p.detach().clone() for p in module.parameters()], torch.get_rng_state()


@pytest.mark.parametrize(("package", "accumulate"), [(PACKAGES[0], 1), (PACKAGES[1], 3)])
def test_a_fit_with_the_callback_is_bit_identical_to_the_same_fit_without_it(package: str, accumulate: int) -> None:
    config = Config(package=package, max_epochs=3, accumulate=accumulate, val_check_interval=0.5)
    seen, weights, rng = _fit(config, [ProgressTracker()])
    seen_without, weights_without, rng_without = _fit(config, [])
    assert seen == seen_without
    assert all(torch.equal(a, b) for a, b in zip(weights, weights_without, strict=True))
    assert torch.equal(rng, rng_without)


@pytest.mark.parametrize(("package", "logged"), [(PACKAGES[0], False), (PACKAGES[1], True)])
def test_a_fit_with_the_callback_leaves_the_same_files_as_the_same_fit_without_it(
    package: str, logged: bool, tmp_path: Path
) -> None:
    config = Config(package=package, max_epochs=2)
    names = _names_left(tmp_path / "with", config, [ProgressTracker()], logged)
    assert names == _names_left(tmp_path / "without", config, [], logged)
    assert any(name.endswith(".ckpt") for name in names)
