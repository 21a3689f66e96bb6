"""A reseed of the global RNG after ``fit(ckpt_path=...)`` restored it, before the first resumed batch, is named.

The tracker restores the global RNGs with its checkpoint entry; a ``torch.manual_seed`` (or
``seed_everything``) in a hook that runs after that makes the resumed run's random draws differ
from the uninterrupted run while the progress compares equal: one ``InexactResumeWarning``
says so. Both Lightning packages, with the real Trainer.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

pytest.importorskip("pytorch_lightning")

import torch

from helpers.lightning_matrix import PACKAGES
from helpers.lightning_reseed import BATCHES, fit
from helpers.rng_warnings import rng_warnings

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

MID_EPOCH = 1  # saved after train batch 1 of epoch 0
EPOCH_END = BATCHES - 1  # saved after the last batch of epoch 0: the resumed run begins epoch 1 (its sampler draws)
_SETUP = "between the checkpoint load and Lightning's first train iterator"


def _resume(
    package: str, tmp_path: Path, save_at: int, reseed: str = "", draw_before: bool = False
) -> tuple[list[str], list[torch.Tensor]]:
    path = tmp_path / "saved.ckpt"
    fit(package, path, save_at=save_at, draw_before=draw_before)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        weights = fit(package, path, reseed=reseed, draw_before=draw_before)
    return rng_warnings(caught), weights


@pytest.mark.parametrize("package", PACKAGES)
@pytest.mark.parametrize(
    ("reseed", "save_at", "where"),
    [
        pytest.param("module.on_train_start", MID_EPOCH, "in an on_train_start hook", id="module-on_train_start"),
        pytest.param("callback.on_train_start", MID_EPOCH, "in an on_train_start hook", id="callback-on_train_start"),
        pytest.param("module.on_fit_start", MID_EPOCH, _SETUP, id="module-on_fit_start"),
        pytest.param("callback.on_fit_start", EPOCH_END, _SETUP, id="callback-on_fit_start-epoch-end"),
    ],
)
def test_a_reseed_after_the_load_before_the_first_resumed_batch_warns_once_naming_the_cause(
    package: str, reseed: str, save_at: int, where: str, tmp_path: Path
) -> None:
    messages, _ = _resume(package, tmp_path, save_at, reseed)
    assert len(messages) == 1
    assert where in messages[0]
    assert "Seed before Trainer.fit(ckpt_path=...)" in messages[0]


@pytest.mark.parametrize("package", PACKAGES)
def test_an_ordinary_mid_epoch_resume_is_exact_and_silent(package: str, tmp_path: Path) -> None:
    straight = fit(package, tmp_path / "none.ckpt")
    messages, weights = _resume(package, tmp_path, MID_EPOCH)
    assert messages == []
    assert all(torch.equal(a, b) for a, b in zip(weights, straight, strict=True))


@pytest.mark.parametrize("package", PACKAGES)
def test_a_resume_at_an_epoch_boundary_where_the_sampler_draws_is_exact_and_silent(
    package: str, tmp_path: Path
) -> None:
    straight = fit(package, tmp_path / "none.ckpt")
    messages, weights = _resume(package, tmp_path, EPOCH_END)
    assert messages == []
    assert all(torch.equal(a, b) for a, b in zip(weights, straight, strict=True))


@pytest.mark.parametrize("package", PACKAGES)
def test_a_callback_before_the_tracker_drawing_at_every_batch_start_raises_no_false_alarm(
    package: str, tmp_path: Path
) -> None:
    straight = fit(package, tmp_path / "none.ckpt", draw_before=True)
    messages, weights = _resume(package, tmp_path, MID_EPOCH, draw_before=True)
    assert messages == []
    assert all(torch.equal(a, b) for a, b in zip(weights, straight, strict=True))
