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


@pytest.mark.parametrize("kind", ["map", "stateful"])  # a plain DataLoader, a StatefulDataLoader (positioned)
def test_a_fit_resumed_mid_epoch_leaves_no_loader_worker_running_when_it_returns(kind: str, tmp_path: Path) -> None:
    path = tmp_path / "saved.ckpt"
    # a plain loader saves without workers (none left to the collection below); a StatefulDataLoader's state resumes
    # only at the worker count it was saved with (the collection below ends the saving fit's workers)
    fit(PACKAGES[0], path, save_at=1, kind=kind, workers=2 if kind == "stateful" else 0)
    gc.collect()
    before = set(multiprocessing.active_children())  # other tests' in this process
    gc.disable()  # what Lightning drops is freed as it drops it, not at a collection
    try:
        fit(PACKAGES[0], path, workers=2, kind=kind)
        started = set(multiprocessing.active_children()) - before
    finally:
        gc.enable()
    assert started == set()
