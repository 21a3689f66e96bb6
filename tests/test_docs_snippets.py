"""Every python block of README.md and docs/ runs, with tiny data, as its page shows it.

How a block is set up and run: tests/helpers/doc_snippets.py. Each run is a new process in a
scratch folder; a block that reads ``resuming`` runs a second time there and resumes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.conformance_only import MARKS
from helpers.doc_snippets import EXAMPLE, PAGES, ROOT, SETUPS, Snippet, snippets

SNIPPETS = [snippet for page in PAGES for snippet in snippets(page)]
RUNNABLE = [snippet for snippet in SNIPPETS if snippet.setup != EXAMPLE]
_FRAMEWORKS = {"lightning": "pytorch_lightning", "ignite": "ignite", "accelerate": "accelerate"}


def test_every_python_block_names_a_setup_it_runs_with() -> None:
    unmarked = [s.name for s in SNIPPETS if s.setup is None]
    unknown = [f"{s.name}: {s.setup}" for s in SNIPPETS if s.setup not in (*SETUPS, EXAMPLE, None)]
    assert not unmarked, f"python blocks without a '<!-- snippet: NAME -->' line before them: {unmarked}"
    assert not unknown, f"markers naming no setup of tests/helpers/doc_snippets.py: {unknown}"


def test_only_the_adapter_guide_shows_text_of_the_example() -> None:
    assert {s.page.name for s in SNIPPETS if s.setup == EXAMPLE} <= {"adapters.md"}


def _run(snippet: Snippet, folder: Path, resuming: bool) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tests"), PYTHONWARNINGS="ignore")
    page = str(snippet.page.relative_to(ROOT))
    command = [sys.executable, "-m", "helpers.doc_snippets", page, str(snippet.index), "1" if resuming else "0"]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{snippet.name} (resuming={resuming}) failed:\n{snippet.code}\n{done.stderr[-4000:]}"


# The blocks of docs/distributed.md start several processes each: make conformance runs them.
CASES = [pytest.param(s, marks=MARKS if s.page.name == "distributed.md" else (), id=s.name) for s in RUNNABLE]


@pytest.mark.parametrize("snippet", CASES)
def test_the_block_runs(snippet: Snippet, tmp_path: Path) -> None:
    for prefix, module in _FRAMEWORKS.items():
        if snippet.setup is not None and snippet.setup.startswith(prefix):
            pytest.importorskip(module)
    _run(snippet, tmp_path, resuming=False)
    if snippet.runs_twice:
        _run(snippet, tmp_path, resuming=True)
