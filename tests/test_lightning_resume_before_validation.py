"""A checkpoint in the last ``on_train_batch_end`` of an epoch, before its due validation, with two train loaders.

Lightning skips that validation on resume (warned at save): the resumed run builds its validation iterator
once, in ``increment_progress_to_evaluation_end``, without running it, where the uninterrupted run built it and
ran it. Each build draws one value from torch's global RNG, so the draws come in the same number and the
training part is bit-identical: weights, sample ids and torch's RNG at the end; only the skipped validation's
counts differ. (The builds take each other's draws as worker base seeds: the same with ``num_workers=0``.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pytorch_lightning")

import torch

from helpers.lightning_matrix import PACKAGES, Config, _comparable, _run_once

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.mark.parametrize("package", PACKAGES)
def test_training_resumes_bit_identical_and_only_the_skipped_validation_differs(package: str, tmp_path: Path) -> None:
    config = Config(package=package, train_sizes=(10, 7), val_check_interval=2, resume_at=3)
    straight = _run_once(config, 0)
    straight_rng = torch.get_rng_state()
    first = _run_once(config, 0, save_at=3, path=tmp_path / "mid.ckpt")
    resumed = _run_once(config, 1234, resume=tmp_path / "mid.ckpt")
    assert any("skips that validation" in message for message in first.inexact_warnings)
    assert first.seen + resumed.seen == straight.seen
    assert all(torch.equal(a, b) for a, b in zip(resumed.weights, straight.weights, strict=True))
    assert torch.equal(torch.get_rng_state(), straight_rng)
    skipped, uninterrupted = _comparable(resumed.progress), _comparable(straight.progress)
    assert skipped["stages"]["train"] == uninterrupted["stages"]["train"]
    assert skipped["stages"]["validate"]["epochs"]["lifetime"]["completed"] == 3
    assert uninterrupted["stages"]["validate"]["epochs"]["lifetime"]["completed"] == 4
