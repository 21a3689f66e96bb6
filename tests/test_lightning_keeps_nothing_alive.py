"""The ProgressTracker keeps no Lightning object alive after the fit returns: a train iterator it held would keep
the loader's worker processes running until a garbage collection, which then waits on each of them (the
collection finalizes the worker queues before the iterator, so the workers never hear the shutdown: 5 s each)."""

from __future__ import annotations

import gc
import multiprocessing
from pathlib import Path

import pytest

pytest.importorskip("pytorch_lightning")

from helpers.lightning_matrix import PACKAGES
from helpers.lightning_reseed import fit


def test_a_fit_resumed_mid_epoch_leaves_no_loader_worker_running_when_it_returns(tmp_path: Path) -> None:
    path = tmp_path / "saved.ckpt"
    fit(PACKAGES[0], path, save_at=1)  # no workers: none left to the collection below
    gc.collect()
    before = set(multiprocessing.active_children())  # other tests' in this process
    gc.disable()  # what Lightning drops is freed as it drops it, not at a collection
    try:
        fit(PACKAGES[0], path, workers=2)
        started = set(multiprocessing.active_children()) - before
    finally:
        gc.enable()
    assert started == set()
