"""Instruction counts of a Python script under callgrind: deterministic where timings swing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def instructions(script: str, *args: str) -> int:
    """Instructions callgrind collects running ``python script *args`` (hash seed fixed, one OMP thread)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        result = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, script, *args],
            capture_output=True, text=True, check=False,
            env={**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"},
        )
        match = re.search(r"Collected : (\d+)", result.stderr)
        if result.returncode != 0 or match is None:
            raise RuntimeError(result.stderr[-2000:])
        return int(match.group(1))
