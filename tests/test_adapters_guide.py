"""docs/adapters.md and its worked example, examples/plain_loop.py: the example resumes exactly, uses only
tracker_core.adapter, and every code block of the guide is text of it."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import torch

from tracker_core import comparable_state

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "plain_loop.py"
GUIDE = ROOT / "docs" / "adapters.md"


def _lines(code: str) -> str:
    """``code`` line by line without indentation or blank lines: ruff formats the guide's blocks as
    top-level code (methods dedented, two blank lines between them)."""
    return "\n".join(line.strip() for line in code.splitlines() if line.strip())


def test_every_code_block_of_the_guide_is_text_of_the_example() -> None:
    blocks = re.findall(r"```python\n(.*?)\n```", GUIDE.read_text(), flags=re.DOTALL)
    example = _lines(EXAMPLE.read_text())
    assert blocks
    for block in blocks:
        assert _lines(block) in example, (
            f"docs/adapters.md shows code that examples/plain_loop.py does not have:\n{block}"
        )


def test_the_example_takes_from_the_core_only_tracker_core_and_tracker_core_adapter() -> None:
    imported = {
        node.module
        for node in ast.walk(ast.parse(EXAMPLE.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module is not None
    }
    imported |= {
        alias.name
        for node in ast.walk(ast.parse(EXAMPLE.read_text()))
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    assert {name for name in imported if name.split(".")[0] == "tracker_core"} == {
        "tracker_core",
        "tracker_core.adapter",
    }


STOPS = [1, 4, 7]  # after the first batch, after the last batch of epoch 1, inside an accumulation window


def test_the_example_stopped_and_resumed_in_fresh_objects_ends_as_the_uninterrupted_run(tmp_path: Path) -> None:
    out = tmp_path / "outcomes.pt"
    stops = ",".join(map(str, STOPS))
    command = [sys.executable, str(EXAMPLE), "--stop-after", stops, "--out", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    outcomes = torch.load(out, weights_only=True)
    straight = outcomes["straight"]
    assert len(straight["ids"]) == 12
    assert straight["progress"]["stages"]["train"]["scheduler_steps"]["lifetime"] == 6
    for stop in STOPS:
        stopped, resumed = outcomes[f"stopped after {stop}"], outcomes[f"resumed after {stop}"]
        assert len(stopped["ids"]) == stop
        assert stopped["ids"] + resumed["ids"] == straight["ids"]
        assert all(torch.equal(a, b) for a, b in zip(resumed["weights"], straight["weights"], strict=True))
        assert comparable_state(resumed["progress"]) == comparable_state(straight["progress"])  # a real clock
