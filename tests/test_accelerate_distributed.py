"""Two real processes (gloo on 127.0.0.1): per-rank progress, summed totals, exact resume on both ranks."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("accelerate")

from helpers.conformance_only import MARKS

TESTS = Path(__file__).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _two_ranks(tmp_path: Path, sampler: str) -> list[dict[str, Any]]:
    """Run tests/helpers/accelerate_two_ranks.py in mode ``sampler`` on two processes: each rank's findings."""
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
    return [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in range(2)]


@pytest.mark.parametrize("sampler", ["stateful", pytest.param("seedable", marks=MARKS)])  # both: make conformance
def test_two_ranks_count_their_own_shard_sum_to_the_dataset_and_resume_exactly(tmp_path, sampler):
    """``stateful``: Accelerate's StatefulDataLoader over its seedable sampler, saved mid-epoch and resumed at its batch
    on each rank; ``seedable``: a plain loader saved between epochs (Accelerate nests the sampler and its generator
    inside its BatchSamplerShard)."""
    findings = _two_ranks(tmp_path, sampler)
    assert [f["rank"] for f in findings] == [0, 1] and findings[0]["world"] == 2
    for found in findings:
        assert (found["ids_exact"], found["weights_exact"], found["progress_exact"]) == (True, True, True)
        assert found["warnings"] == []  # an exact resume warns of nothing
    assert findings[0]["ids"] != findings[1]["ids"]  # each rank trains its own shard
    # 20 samples, batches of 3 per rank: 4 batches of 3 per rank and epoch (even_batches pads the last).
    assert [f["samples"] for f in findings] == [24, 24]
    assert findings[0]["summed_samples"] == findings[1]["summed_samples"] == 48
    assert findings[0]["divergence"] == findings[1]["divergence"] == []  # the ranks agree on every count


def test_two_ranks_warn_that_torchdata_s_own_sampler_draws_its_order_again(tmp_path):
    """A StatefulDataLoader(shuffle=True) prepared with use_stateful_dataloader on two processes: Accelerate's
    BatchSamplerShard has no state, so the loader's state leaves out its torchdata RandomSampler's, and the resume
    mid-epoch draws the order again (huggingface/accelerate#4195). The trade is warned at the save and at the resume."""
    for found in _two_ranks(tmp_path, "torchdata"):
        assert (found["ids_exact"], found["progress_exact"]) == (False, True)  # other samples, counted exactly
        drawn_again = [w for w in found["warnings"] if "BatchSamplerShard has no state of its own" in w]
        assert [w.split(" train dataloader")[0] for w in drawn_again] == ["saving", "resuming"], found["warnings"]
        assert all("huggingface/accelerate#4195" in w for w in drawn_again)
