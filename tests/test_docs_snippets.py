"""Every python block of README.md and docs/ runs, with tiny data, as its page shows it.

How a block is set up and run: tests/helpers/doc_snippets.py. Each run is a new process in a
scratch folder, forked from one that imported the frameworks (tests/helpers/forked_runs.py); a block that
reads ``resuming`` runs a second time there and resumes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.conformance_only import MARKS
from helpers.doc_snippets import EXAMPLE, PAGES, ROOT, SETUPS, Snippet, snippets
from helpers.forked_runs import ForkServer

SNIPPETS = [snippet for page in PAGES for snippet in snippets(page)]
RUNNABLE = [snippet for snippet in SNIPPETS if snippet.setup != EXAMPLE]
_FRAMEWORKS = {"lightning": "pytorch_lightning", "ignite": "ignite", "accelerate": "accelerate"}
_PRELOADED = ["torch", "torchdata.stateful_dataloader", *_FRAMEWORKS.values(), "tracker_core"] + [
    f"tracker_core.integrations.{name}" for name in _FRAMEWORKS
]  # what the blocks' setups import: each run's process starts with them imported


def test_every_python_block_names_a_setup_it_runs_with() -> None:
    unmarked = [s.name for s in SNIPPETS if s.setup is None]
    unknown = [f"{s.name}: {s.setup}" for s in SNIPPETS if s.setup not in (*SETUPS, EXAMPLE, None)]
    assert not unmarked, f"python blocks without a '<!-- snippet: NAME -->' line before them: {unmarked}"
    assert not unknown, f"markers naming no setup of tests/helpers/doc_snippets.py: {unknown}"


def test_only_the_adapter_guide_shows_text_of_the_example() -> None:
    assert {s.page.name for s in SNIPPETS if s.setup == EXAMPLE} <= {"adapters.md"}


@pytest.fixture(scope="module")
def forked() -> Iterator[ForkServer]:
    server = ForkServer(_PRELOADED, env=dict(os.environ, PYTHONPATH=str(ROOT / "tests"), PYTHONWARNINGS="ignore"))
    yield server
    server.close()


def _run(forked: ForkServer, snippet: Snippet, folder: Path, resuming: bool) -> None:
    page = str(snippet.page.relative_to(ROOT))
    argv = ["helpers.doc_snippets", page, str(snippet.index), "1" if resuming else "0"]
    rc, stderr = forked.run(argv, cwd=folder, timeout=300)
    assert rc == 0, f"{snippet.name} (resuming={resuming}) failed:\n{snippet.code}\n{stderr[-4000:]}"


# The blocks of docs/distributed.md start several processes each: make conformance runs them.
CASES = [pytest.param(s, marks=MARKS if s.page.name == "distributed.md" else (), id=s.name) for s in RUNNABLE]


@pytest.mark.parametrize("snippet", CASES)
def test_the_block_runs(forked: ForkServer, snippet: Snippet, tmp_path: Path) -> None:
    for prefix, module in _FRAMEWORKS.items():
        if snippet.setup is not None and snippet.setup.startswith(prefix):
            pytest.importorskip(module)
    _run(forked, snippet, tmp_path, resuming=False)
    if snippet.runs_twice:
        _run(forked, snippet, tmp_path, resuming=True)
