"""The framework examples in examples/ do what their docstrings say: a run checkpointed mid-epoch and resumed in
fresh objects ends with the uninterrupted run's weights (each prints whether it does). Three processes of about 5 s:
``make conformance``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers.conformance_only import conformance_only

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("example", "framework"),
    [("lightning_resume", "pytorch_lightning"), ("ignite_resume", "ignite"), ("accelerate_resume", "accelerate")],
)
@conformance_only
def test_the_resume_example_ends_with_the_uninterrupted_runs_weights(example: str, framework: str) -> None:
    pytest.importorskip(framework)
    pytest.importorskip("torchdata")
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / f"{example}.py")], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    assert "uninterrupted run" in last and last.endswith(": True"), done.stdout
    assert "InexactResumeWarning" not in done.stderr
