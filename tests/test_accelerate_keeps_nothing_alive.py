"""AcceleratorProgress keeps no Accelerate object alive after the user drops the Accelerator: holding it would keep
a train loader's worker processes running until a garbage collection, which then waits on each of them (the
collection finalizes the worker queues before the iterator, so the workers never hear the shutdown: 5 s each)."""

from __future__ import annotations

import gc
import multiprocessing
import weakref
from pathlib import Path

import pytest

pytest.importorskip("accelerate")

from helpers.accelerate_drive import Setup, StopAt, run

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")

_WORKERS = Setup(num_workers=2, stateful=True, torchdata=True)


def _dropped_run_leaves(keep_progress: bool = False, **kwargs: object) -> tuple[bool, set[object]]:
    """Whether the run's Accelerator is freed as the user drops it (``keep_progress``: all but the progress), and the
    worker processes still running then."""
    run(Setup(epochs=1))  # first: torch's imports on a first use leave frames behind
    gc.collect()
    before = set(multiprocessing.active_children())  # other tests' in this process
    gc.disable()  # what the user drops is freed as it drops it, not at a collection
    try:
        result = run(_WORKERS, **kwargs)  # type: ignore[arg-type]
        accelerator = weakref.ref(result.accelerator)
        kept = result.progress if keep_progress else None
        del result
        return accelerator() is None, set(multiprocessing.active_children()) - before
    finally:
        del kept
        gc.enable()


def test_an_accelerator_dropped_after_a_save_mid_epoch_is_freed_with_its_loader_workers(tmp_path: Path) -> None:
    assert _dropped_run_leaves(stop=StopAt(1), save_dir=str(tmp_path)) == (True, set())


def test_an_accelerator_dropped_after_a_resume_mid_epoch_is_freed_with_its_loader_workers(tmp_path: Path) -> None:
    run(_WORKERS, stop=StopAt(1), save_dir=str(tmp_path))
    assert _dropped_run_leaves(stop=StopAt(5), save_dir=str(tmp_path / "again"), load_dir=str(tmp_path)) == (
        True,
        set(),
    )


def test_a_progress_kept_after_its_accelerator_is_dropped_leaves_no_loader_worker_running(tmp_path: Path) -> None:
    assert _dropped_run_leaves(keep_progress=True, stop=StopAt(1), save_dir=str(tmp_path)) == (True, set())


def test_a_progress_whose_accelerator_was_freed_refuses_a_fit_naming_it() -> None:
    progress = run(Setup(epochs=1)).progress  # the Accelerator is dropped with the run's result
    with pytest.raises(ReferenceError, match="the Accelerator this AcceleratorProgress tracks was freed"):
        progress.fit(1)
    assert progress.view.train.epochs.lifetime.completed == 1  # what it counted stays readable
