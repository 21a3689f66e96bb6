"""A fit checkpoint taken inside a validation batch: a listed trade (docs/lightning.md, Limits).

Lightning finishes that validation on resume: it builds the validation iterators again (each draws from
torch's global RNG) and re-reads the data from the first batch of the first loader, counting on from the
batches done. Going on at the cut batch would take Lightning's private loop internals, so the tracker does
not: it warns when such a checkpoint is saved and when it is resumed, counts as Lightning does, and puts the
global RNGs back to the checkpoint's when that validation ends. The training after it is then exact when the
uninterrupted run drew nothing more in that validation after the cut (one validation loader, or the cut in
the last one): same train sample ids, weights, torch RNG and counts. Both Lightning packages, the real Trainer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
IN_THE_LAST_LOADER = [3, 4, 8, 9]
IN_AN_EARLIER_LOADER = [0, 2, 7]
# with 2 workers (each iterator starts its processes: slow), a few of them
WITH_WORKERS = [(1, (7,)), (4, (7,)), (3, (7, 5))]

_straight: dict[tuple[str, int, tuple[int, ...], int], Outcome] = {}


def _uninterrupted(package: str, tmp_path: Path, workers: int, val_sizes: tuple[int, ...], sanity: int) -> Outcome:
    key = (package, workers, val_sizes, sanity)
    if key not in _straight:
        _straight[key] = fit(package, tmp_path / "none.ckpt", workers=workers, val_sizes=val_sizes, sanity_steps=sanity)
    return _straight[key]


def _counts(progress: dict[str, Any]) -> dict[str, Any]:
    """A progress state without its history (ledger, anomalies: the resumed run notes the re-read) and without
    the validation's samples and per-loader counts: Lightning re-reads from the first batch of the first loader,
    so the batches it runs in place of those left are of other sizes, and of other loaders."""
    state = {**without_ledger(progress), "anomalies": []}
    validate = {key: value for key, value in state["stages"]["validate"].items() if key not in _REREAD}
    return {**state, "stages": {**state["stages"], "validate": validate}}


_REREAD = ("samples", "dataloaders")


def _cut_and_resumed(
    package: str, tmp_path: Path, save_at: int, workers: int = 0, val_sizes: tuple[int, ...] = (7,), sanity: int = 0
) -> tuple[Outcome, Outcome]:
    path = tmp_path / "cut.ckpt"
    options = {"workers": workers, "val_sizes": val_sizes, "sanity_steps": sanity}
    with pytest.warns(InexactResumeWarning, match="checkpoint saved inside a validation"):
        first = fit(package, path, save_at, **options)
    with pytest.warns(InexactResumeWarning, match="re-reading its data from the first batch"):
        resumed = fit(package, path, **options)
    return first, resumed


def _assert_training_goes_on_exactly(
    package: str, tmp_path: Path, save_at: int, workers: int = 0, val_sizes: tuple[int, ...] = (7,), sanity: int = 0
) -> None:
    straight = _uninterrupted(package, tmp_path, workers, val_sizes, sanity)
    first, resumed = _cut_and_resumed(package, tmp_path, save_at, workers, val_sizes, sanity)
    assert first.train_seen + resumed.train_seen == straight.train_seen
    assert all(torch.equal(a, b) for a, b in zip(resumed.weights, straight.weights, strict=True))
    assert torch.equal(resumed.rng, straight.rng)
    assert _counts(resumed.progress) == _counts(straight.progress)
    assert any("re-reading" in anomaly for anomaly in resumed.progress["anomalies"])


@pytest.mark.parametrize("package", PACKAGES)
@pytest.mark.parametrize("save_at", ONE_LOADER)
def test_after_a_validation_resumed_inside_a_batch_one_loader_trains_as_the_uninterrupted_fit(
    package: str, save_at: int, tmp_path: Path
) -> None:
    _assert_training_goes_on_exactly(package, tmp_path, save_at)


@pytest.mark.parametrize("package", PACKAGES)
@pytest.mark.parametrize("save_at", IN_THE_LAST_LOADER)
def test_after_a_validation_resumed_inside_its_last_loader_training_goes_on_as_the_uninterrupted_fit(
    package: str, save_at: int, tmp_path: Path
) -> None:
    _assert_training_goes_on_exactly(package, tmp_path, save_at, val_sizes=(7, 5))


@pytest.mark.parametrize("package", PACKAGES)
@pytest.mark.parametrize("save_at", IN_AN_EARLIER_LOADER)
def test_a_validation_resumed_inside_an_earlier_loader_is_warned_and_counted_as_lightning_counts(
    package: str, save_at: int, tmp_path: Path
) -> None:
    straight = _uninterrupted(package, tmp_path, 0, (7, 5), 0)
    _, resumed = _cut_and_resumed(package, tmp_path, save_at, val_sizes=(7, 5))
    assert _counts(resumed.progress) == _counts(straight.progress)


@pytest.mark.parametrize("package", PACKAGES)
def test_lightning_rereads_the_cut_validation_from_its_first_batch(package: str, tmp_path: Path) -> None:
    straight = _uninterrupted(package, tmp_path, 0, (7,), 0)
    first, resumed = _cut_and_resumed(package, tmp_path, 1)
    assert first.val_seen + resumed.val_seen != straight.val_seen
    assert resumed.val_seen[0][2] == straight.val_seen[0][2]  # the first batch of the first loader, again
    assert len(first.val_seen) + len(resumed.val_seen) == len(straight.val_seen)


@pytest.mark.parametrize("package", PACKAGES)
@pytest.mark.parametrize(("save_at", "val_sizes"), WITH_WORKERS)
def test_with_loader_workers_training_goes_on_exactly_after_a_validation_resumed_inside_its_last_loader(
    package: str, save_at: int, val_sizes: tuple[int, ...], tmp_path: Path
) -> None:
    _assert_training_goes_on_exactly(package, tmp_path, save_at, 2, val_sizes)


@conformance_only
@pytest.mark.parametrize("package", PACKAGES)
def test_with_a_sanity_check_training_goes_on_exactly_after_a_validation_resumed_inside_its_last_loader(
    package: str, tmp_path: Path
) -> None:
    _assert_training_goes_on_exactly(package, tmp_path, 3, val_sizes=(7, 5), sanity=2)


@pytest.mark.parametrize("package", PACKAGES)
def test_a_cut_validation_whose_step_fetches_its_batches_is_reread_by_lightning_and_named(
    package: str, tmp_path: Path
) -> None:
    path = tmp_path / "cut.ckpt"
    with pytest.warns(InexactResumeWarning, match="checkpoint saved inside a validation"):
        fit(package, path, 1, fetch_in_step=True)
    with pytest.warns(InexactResumeWarning, match="re-reading its data from the first batch"):
        resumed = fit(package, path, fetch_in_step=True)
    assert any("re-reading" in anomaly for anomaly in resumed.progress["anomalies"])
