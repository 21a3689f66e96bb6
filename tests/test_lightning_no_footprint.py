"""The Lightning callback leaves no footprint (issue 13, item 12): an uninterrupted fit with ProgressTracker trains
bit-identically to the same fit without it: weights, sample order and the global RNG stream, with noise drawn from
the global RNG in every step (like dropout), shuffled data and a validation between epochs."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")

import torch
from torch.utils.data import DataLoader

from tracker_core.integrations.lightning import ProgressTracker

from helpers.lightning_matrix import PACKAGES, Config, model, trainer
from helpers.lightning_program import Indexed

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


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
