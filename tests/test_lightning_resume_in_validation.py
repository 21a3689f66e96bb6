"""A fit resumed from a checkpoint taken inside a validation batch ends exactly like the uninterrupted fit.

Lightning finishes that validation on resume: it calls ``val_dataloader()`` and builds the validation
iterators again (each draws from torch's global RNG), runs the validation's start hooks again, and
re-reads the data from the first batch of the first loader. The uninterrupted run did all that before
the checkpoint. The tracker puts the RNGs back as the checkpoint had them and lets the validation go on
at the batch the checkpoint cut, so weights, sample ids, validation batches, progress and torch's RNG
come out as in the uninterrupted run, without a warning. Both Lightning packages, the real Trainer.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

pytest.importorskip("pytorch_lightning")

import torch

from tracker_core import InexactResumeWarning

from helpers.conformance_only import conformance_only
from helpers.ledger import without_ledger
from helpers.lightning_cut_validation import Outcome, fit
from helpers.lightning_matrix import PACKAGES

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

# one loader of 3 batches: validations 0-2 (epoch 0, mid-epoch), 3-5 (epoch 0's end), 6-8 (epoch 1, mid-epoch)
ONE_LOADER = [0, 1, 2, 4, 7]
# loaders of 3 and 2 batches: validation batches 0-4 mid-epoch (3, 4: the second loader), 5-9 at epoch 0's end
TWO_LOADERS = [0, 1, 2, 3, 4, 7, 8]
# with 2 workers (each iterator starts its processes: slow), a few of them
WITH_WORKERS = [(1, (7,)), (4, (7,)), (1, (7, 5)), (3, (7, 5))]

_straight: dict[tuple[str, int, tuple[int, ...], int], Outcome] = {}


def _uninterrupted(package: str, tmp_path: Path, workers: int, val_sizes: tuple[int, ...], sanity: int) -> Outcome:
    key = (package, workers, val_sizes, sanity)
    if key not in _straight:
        _straight[key] = fit(package, tmp_path / "none.ckpt", workers=workers, val_sizes=val_sizes, sanity_steps=sanity)
    return _straight[key]


def _assert_resumes_exactly(
    package: str, tmp_path: Path, save_at: int, workers: int = 0, val_sizes: tuple[int, ...] = (7,), sanity: int = 0
) -> None:
    straight = _uninterrupted(package, tmp_path, workers, val_sizes, sanity)
    path = tmp_path / "cut.ckpt"
    options = {"workers": workers, "val_sizes": val_sizes, "sanity_steps": sanity}
    first = fit(package, path, save_at, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InexactResumeWarning)
        resumed = fit(package, path, **options)
    assert first.train_seen + resumed.train_seen == straight.train_seen
    assert first.val_seen + resumed.val_seen == straight.val_seen
    assert all(torch.equal(a, b) for a, b in zip(resumed.weights, straight.weights, strict=True))
    assert torch.equal(resumed.rng, straight.rng)
    assert without_ledger(resumed.progress) == without_ledger(straight.progress)


@pytest.mark.parametrize("package", PACKAGES)
@pytest.mark.parametrize("save_at", ONE_LOADER)
def test_a_fit_resumed_inside_a_validation_batch_ends_as_the_uninterrupted_fit(
    package: str, save_at: int, tmp_path: Path
) -> None:
    _assert_resumes_exactly(package, tmp_path, save_at)


@pytest.mark.parametrize("package", PACKAGES)
@pytest.mark.parametrize("save_at", TWO_LOADERS)
def test_with_several_validation_loaders_the_cut_validation_goes_on_at_the_cut_batch_of_its_loader(
    package: str, save_at: int, tmp_path: Path
) -> None:
    _assert_resumes_exactly(package, tmp_path, save_at, val_sizes=(7, 5))


@pytest.mark.parametrize("package", PACKAGES)
@pytest.mark.parametrize(("save_at", "val_sizes"), WITH_WORKERS)
def test_with_loader_workers_a_fit_resumed_inside_a_validation_batch_ends_as_the_uninterrupted_fit(
    package: str, save_at: int, val_sizes: tuple[int, ...], tmp_path: Path
) -> None:
    _assert_resumes_exactly(package, tmp_path, save_at, 2, val_sizes)


@conformance_only
@pytest.mark.parametrize("package", PACKAGES)
def test_a_fit_with_a_sanity_check_resumed_inside_a_validation_batch_ends_as_the_uninterrupted_fit(
    package: str, tmp_path: Path
) -> None:
    _assert_resumes_exactly(package, tmp_path, 3, val_sizes=(7, 5), sanity=2)


@pytest.mark.parametrize("package", PACKAGES)
def test_a_cut_validation_whose_step_fetches_its_batches_is_reread_by_lightning_and_named(
    package: str, tmp_path: Path
) -> None:
    path = tmp_path / "cut.ckpt"
    fit(package, path, 1, fetch_in_step=True)
    with pytest.warns(InexactResumeWarning, match="re-reading its data from the first batch"):
        resumed = fit(package, path, fetch_in_step=True)
    assert any("re-reading" in anomaly for anomaly in resumed.progress["anomalies"])
