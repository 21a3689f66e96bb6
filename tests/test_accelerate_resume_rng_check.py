"""A reseed or draw of the global RNG after ``accelerator.load_state``, before the first resumed batch, is named.

``load_state`` restores the global RNGs to the save instant; a ``set_seed`` after it, or a draw
the uninterrupted run did not make there, makes the resumed run's random draws differ while
the progress compares equal: one ``InexactResumeWarning`` says so. A real Accelerator on CPU.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

pytest.importorskip("accelerate")

import torch

from helpers.accelerate_reseed import BATCHES, program, train
from helpers.rng_warnings import rng_warnings

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")

MID_EPOCH = 1  # saved after train batch 1 of epoch 0
EPOCH_END = BATCHES - 1  # saved after the last batch of epoch 0: the next epoch's sampler draws before its first batch
_LOOP = "between accelerator.load_state and the fit"
_PASS = "between accelerator.load_state and the first train pass of the resumed epoch"


def _resume(
    tmp_path: Path, save_at: int, after_load: str = "", epoch_draw: bool = False
) -> tuple[list[str], list[torch.Tensor]]:
    path = tmp_path / "saved"
    train(path, save_at=save_at, epoch_draw=epoch_draw)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        weights = train(path, after_load=after_load, epoch_draw=epoch_draw)
    return rng_warnings(caught), weights


@pytest.mark.parametrize(
    ("save_at", "after_load", "epoch_draw", "where"),
    [
        pytest.param(MID_EPOCH, "set_seed", False, _LOOP, id="set_seed-after-load_state"),
        pytest.param(EPOCH_END, "manual_seed", False, _LOOP, id="manual_seed-after-load_state-epoch-end"),
        pytest.param(MID_EPOCH, "", True, _PASS, id="draw-in-the-resumed-epochs-body"),
    ],
)
def test_a_reseed_after_load_state_before_the_first_resumed_batch_warns_once_naming_the_cause(
    save_at: int, after_load: str, epoch_draw: bool, where: str, tmp_path: Path
) -> None:
    messages, _ = _resume(tmp_path, save_at, after_load, epoch_draw)
    assert len(messages) == 1
    assert where in messages[0]
    assert "Seed before accelerator.load_state" in messages[0]


def test_an_ordinary_mid_epoch_resume_is_exact_and_silent(tmp_path: Path) -> None:
    straight = train(tmp_path / "none")
    messages, weights = _resume(tmp_path, MID_EPOCH)
    assert messages == []
    assert all(torch.equal(a, b) for a, b in zip(weights, straight, strict=True))


def test_a_resume_at_an_epoch_boundary_where_the_sampler_draws_is_exact_and_silent(tmp_path: Path) -> None:
    straight = train(tmp_path / "none")
    messages, weights = _resume(tmp_path, EPOCH_END)
    assert messages == []
    assert all(torch.equal(a, b) for a, b in zip(weights, straight, strict=True))


def _first_resumed_batch_rng(
    tmp_path: Path, reseed: bool = False, save: bool = False
) -> tuple[torch.Tensor, list[str]]:
    """The global RNG state at the first batch resumed from a mid-epoch checkpoint (``reseed``: ``manual_seed(0)``
    after ``load_state``; ``save``: then a ``save_state``), and the RNG warnings."""
    train(tmp_path / "saved", save_at=MID_EPOCH)
    accelerator, _model, _optimizer, loader, progress = program(resume=True)
    at_first_batch: list[torch.Tensor] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        accelerator.load_state(str(tmp_path / "saved"))
        if reseed:
            torch.manual_seed(0)
        if save:
            accelerator.save_state(str(tmp_path / "again"))
        with progress.fit(2) as fit:
            for _epoch in fit.epochs():
                for _batch in progress.train(loader):
                    at_first_batch.append(torch.get_rng_state())
                    break
                break
    return at_first_batch[0], rng_warnings(caught)


def test_a_reseed_after_load_state_is_kept_at_the_first_resumed_batch_and_warned(tmp_path: Path) -> None:
    rng, messages = _first_resumed_batch_rng(tmp_path, reseed=True)
    assert torch.equal(rng, torch.manual_seed(0).get_state())  # the build's draws undone, the reseed not
    assert [_LOOP in message for message in messages] == [True]


def test_a_save_between_load_state_and_the_first_resumed_batch_changes_no_draw(tmp_path: Path) -> None:
    # Accelerate's save builds the restored loader's iterator (state_dict()), drawing; the tracker undoes it
    rng, messages = _first_resumed_batch_rng(tmp_path / "saved-again", save=True)
    assert torch.equal(rng, _first_resumed_batch_rng(tmp_path / "resumed")[0])
    assert messages == []


def test_a_reseed_then_a_save_before_the_first_resumed_batch_keeps_the_reseed(tmp_path: Path) -> None:
    rng, messages = _first_resumed_batch_rng(tmp_path, reseed=True, save=True)
    assert torch.equal(rng, torch.manual_seed(0).get_state())
    assert [_LOOP in message for message in messages] == [True]
