"""benchmarks/gpu_exact.py: skips cleanly without CUDA, and its programs resume exactly (checked on the CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from helpers.conformance_only import conformance_only

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_exact.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # no CUDA device, even on a GPU machine
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=600)


def test_without_cuda_it_says_why_it_skips_and_exits_0() -> None:
    done = _run()

    assert done.returncode == 0, done.stderr
    assert done.stdout == "gpu_exact: skipped: no CUDA device here (torch.cuda.is_available() is False)\n"


@conformance_only
def test_on_the_cpu_a_killed_ignite_run_resumes_as_if_never_interrupted_with_and_without_amp() -> None:
    done = _run("--device", "cpu", "--framework", "ignite")

    assert done.returncode == 0, done.stdout + done.stderr
    assert "ignite on cpu: weights equal: True; sample ids equal: True; progress equal: True" in done.stdout
    assert "ignite with amp on cpu: weights equal: True; sample ids equal: True; progress equal: True" in done.stdout
    assert done.stdout.endswith("gpu_exact: all exact: True\n")
