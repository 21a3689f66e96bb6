"""Two real processes (gloo on 127.0.0.1): per-rank progress, summed totals, exact resume on both ranks."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("accelerate")

from helpers.conformance_only import MARKS

TESTS = Path(__file__).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("sampler", ["stateful", pytest.param("seedable", marks=MARKS)])  # both: make conformance
def test_two_ranks_count_their_own_shard_sum_to_the_dataset_and_resume_exactly(tmp_path, sampler):
    """``stateful``: Accelerate's StatefulDataLoader over its seedable sampler, saved mid-epoch and resumed at its batch
    on each rank; ``seedable``: a plain loader saved between epochs (Accelerate nests the sampler and its generator
    inside its BatchSamplerShard)."""
    port = str(_free_port())
    ranks = []
    for rank in range(2):
        env = dict(
            os.environ,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=port,
            RANK=str(rank),
            WORLD_SIZE="2",
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE="2",
            OMP_NUM_THREADS="1",
            PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent)]),
        )
        command = [
            sys.executable,
            str(TESTS / "helpers" / "accelerate_two_ranks.py"),
            str(tmp_path / "ckpt"),
            str(tmp_path / f"rank{rank}.json"),
            sampler,
        ]
        ranks.append(subprocess.Popen(command, env=env, cwd=TESTS))
    assert [process.wait(timeout=150) for process in ranks] == [0, 0]
    findings = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]
    assert [f["rank"] for f in findings] == [0, 1] and findings[0]["world"] == 2
    for found in findings:
        assert (found["ids_exact"], found["weights_exact"], found["progress_exact"]) == (True, True, True)
    assert findings[0]["ids"] != findings[1]["ids"]  # each rank trains its own shard
    # 20 samples, batches of 3 per rank: 4 batches of 3 per rank and epoch (even_batches pads the last).
    assert [f["samples"] for f in findings] == [24, 24]
    assert findings[0]["summed_samples"] == findings[1]["summed_samples"] == 48
    assert findings[0]["divergence"] == findings[1]["divergence"] == []  # the ranks agree on every count
