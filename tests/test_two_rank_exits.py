"""Two-rank runs of each framework with its adapter exit cleanly, every time.

Each run (tests/helpers/two_rank_exits.py) trains a DDP model on 2 gloo ranks for a few batches and saves a
checkpoint holding the tracker's state as it ends: Ignite under ``idist.Parallel`` with the
``ProgressHandler`` in a ``Checkpoint`` at COMPLETED, Lightning's ``Trainer(strategy="ddp",
accelerator="cpu", devices=2)`` with the ``ProgressTracker`` and a ``ModelCheckpoint``, Accelerate with
``AcceleratorProgress`` and ``save_state``, the last two started by torch's launcher. gloo's worker threads
run at the lowest priority, as on a busy machine. Every exit code must be 0 (an abort at exit,
"terminate called without an active exception", is a signal). 10 runs of each with
``TRACKER_MATRIX=full``; one of each, chosen by a seeded draw, otherwise.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.distributed_runs import TESTS, free_port

FULL = os.environ.get("TRACKER_MATRIX") == "full"
RUNS = 10
FRAMEWORKS = ("ignite", "lightning", "accelerate")
ALL = [(framework, run) for framework in FRAMEWORKS for run in range(RUNS)]
CASES = ALL if FULL else [(framework, random.Random(11).randrange(RUNS)) for framework in FRAMEWORKS]
SAVED = {"ignite": "checkpoint_2.pt", "lightning": "epoch=0-step=2.ckpt", "accelerate": "progress_tracker_0.pt"}

pytestmark = pytest.mark.matrix


def _command(framework: str, out: Path) -> list[str]:
    script = [str(TESTS / "helpers" / "two_rank_exits.py"), framework, str(out)]
    if framework == "ignite":  # idist.Parallel spawns its own ranks
        return [sys.executable, *script]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *script]


@pytest.mark.parametrize(("framework", "run"), CASES, ids=[f"{framework}-{run}" for framework, run in CASES])
def test_a_two_rank_run_ending_with_a_checkpoint_exits_with_0(framework: str, run: int, tmp_path: Path) -> None:
    pytest.importorskip({"ignite": "ignite", "lightning": "pytorch_lightning", "accelerate": "accelerate"}[framework])
    clean = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_PORT")}
    env = {**clean, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS.parent)])}
    if framework == "ignite":
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    done = subprocess.run(
        _command(framework, tmp_path), env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "terminate called" not in done.stderr
    assert any(tmp_path.rglob(SAVED[framework])), sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
