"""Mutants of real entries (tests/helpers/fuzz.py): each is refused with a ProgressStateError naming the
changed key and nothing changed (the tracker's ``state_dict()``, global RNGs), or accepted and then consistent (the resumed
state saves and validates again, every loader yields a batch). They run in a child process: a crash
is a test failure, not a dead test run.

A seeded sample of 250 mutants per source (seven sources, the Lightning, Ignite, StatefulDataLoader and
plain-loop ones loaded with the loaders registered before and after the load), plus every mutant of the
classes that once escaped (``escaped_before``), runs in ``make test``; every mutant with
``TRACKER_MATRIX=full`` (``make conformance``), which prints the counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("ignite")
pytest.importorskip("accelerate")
pytest.importorskip("torchdata")

from helpers.distributed_runs import TESTS, folder_once
from helpers.fuzz import write_stateful_ignite_entry
from helpers.saved_checkpoints import saved_checkpoints, two_rank_accelerate_folder

FULL = os.environ.get("TRACKER_MATRIX") == "full"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The real entries' files, written once per session."""
    saved = saved_checkpoints(tmp_path_factory)
    stateful = folder_once(
        tmp_path_factory, "fuzz_stateful", lambda root: write_stateful_ignite_entry(root / "handler.pt")
    )
    return {
        "lightning": str(saved.lightning / "step=2.ckpt"),
        "ignite": str(saved.ignite / "checkpoint_3.pt"),
        "accelerate": str(saved.accelerate / "mid"),
        "stateful": str(stateful / "handler.pt"),
        "two_ranks": str(two_rank_accelerate_folder(tmp_path_factory)),
    }


def _fuzz(files: dict[str, str], tmp_path: Path, sample: int | None) -> dict[str, Any]:
    spec = {"files": files, "seed": 18, "sample": sample, "current": str(tmp_path / "current.txt")}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent)]))
    done = subprocess.run(
        [sys.executable, "-m", "helpers.fuzz", str(tmp_path / "spec.json"), str(tmp_path / "report.json")],
        cwd=TESTS,
        env=env,
        capture_output=True,
        text=True,
        timeout=3000,
        check=False,
    )
    last = (tmp_path / "current.txt").read_text() if (tmp_path / "current.txt").exists() else "(none)"
    assert done.returncode == 0, f"the child died (exit {done.returncode}) at mutant {last}: {done.stderr[-3000:]}"
    report: dict[str, Any] = json.loads((tmp_path / "report.json").read_text())
    print(json.dumps(report["counts"], indent=1))
    assert report["failures"] == [], "\n".join(map(str, report["failures"][:40]))
    return report


def test_a_seeded_sample_of_mutants_of_real_entries_is_refused_naming_the_key_or_accepted_consistently(
    files: dict[str, str], tmp_path: Path
) -> None:
    report = _fuzz(files, tmp_path, 250)
    assert all(counts["refused"] > 0 for counts in report["counts"].values())


@pytest.mark.matrix
@pytest.mark.skipif(not FULL, reason="every mutant with TRACKER_MATRIX=full (make conformance)")
def test_every_mutant_of_real_entries_is_refused_naming_the_key_or_accepted_consistently(
    files: dict[str, str], tmp_path: Path
) -> None:
    _fuzz(files, tmp_path, None)
