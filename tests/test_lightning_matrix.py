"""The Lightning oracle matrix: generated programs checked at every hook against Lightning's own counters.

Each configuration (tests/helpers/lightning_matrix.py) combines accumulation, max_steps/max_epochs,
limit_*_batches, val_check_interval (int and float), check_val_every_n_epoch, sanity steps, several
train loaders (CombinedLoader modes) and validation loaders, manual optimization with two optimizers
and a plain ``loss.backward()``, ``None`` steps, ``training_step(dataloader_iter)``, an exception in any
stage, a finished fit continued on the same Trainer, fit->validate->test->predict on one Trainer, and a
resume from a checkpoint at a train batch, with both Lightning packages. Every configuration: 0
disagreements with the oracle (tests/helpers/lightning_oracle.py), no exception the program itself did
not raise, and a resume that ends exactly like the uninterrupted program (weights, sample ids, progress)
or says why not with an ``InexactResumeWarning``. 320 configurations with ``TRACKER_MATRIX=full``; a seeded
sample of 20 otherwise.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("pytorch_lightning")

from helpers.lightning_matrix import Config, generate, run

FULL = os.environ.get("TRACKER_MATRIX") == "full"
MATRIX_SEED = 2026
CONFIGS = generate(320 if FULL else 20, MATRIX_SEED)

pytestmark = [pytest.mark.matrix, pytest.mark.filterwarnings("ignore")]


@pytest.mark.parametrize("config", CONFIGS, ids=[config.label() for config in CONFIGS])
def test_the_view_agrees_with_lightning_and_resumes_exactly_or_says_why(config: Config, tmp_path: Path) -> None:
    outcome = run(config, tmp_path)
    assert outcome.disagreements == []
    assert outcome.adapter_errors == []
    assert outcome.exact is not False or outcome.inexact_warnings, "an inexact resume without InexactResumeWarning"
