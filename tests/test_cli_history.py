"""``progress-tracker history PATH``: the run ledger of a real checkpoint of each adapter, and goodput."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("ignite")
pytest.importorskip("accelerate")

import torch

from tracker_core.cli import main
from tracker_core.display._history import history_facts

from helpers.saved_checkpoints import Saved, saved_checkpoints

COMPLETED_FILES = {"lightning": "final.ckpt", "ignite": "final_checkpoint_0.pt", "accelerate": "end"}


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Saved:
    return saved_checkpoints(tmp_path_factory)


def _history(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["history", str(path), "--json"]) == 0
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return document


@pytest.mark.parametrize("framework", ["lightning", "ignite", "accelerate"])
def test_history_lists_the_fit_the_checkpoint_recorded(
    framework: str, saved: Saved, capsys: pytest.CaptureFixture[str]
) -> None:
    document = _history(getattr(saved, framework) / COMPLETED_FILES[framework], capsys)
    fits = [run for run in document["runs"] if run["kind"] == "fit"]
    assert len(fits) == 1
    (fit,) = fits
    assert fit["number"] == document["runs"].index(fit)
    assert fit["start"]["batches"] == 0 and fit["end"]["batches"] > 0 and fit["world_size"] == 1
    assert fit["lost"] != "unknown"


def test_history_prints_a_row_per_run_and_the_goodput_line(saved: Saved, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", str(saved.ignite / "final_checkpoint_0.pt")]) == 0
    out = capsys.readouterr().out
    header, fit, *_ = out.splitlines()[1:]
    assert header.split()[:3] == ["run", "kind", "world"]
    assert fit.split()[:2] == ["0", "fit"]
    assert out.splitlines()[-1].startswith("goodput: ")


def test_goodput_is_productive_training_time_over_wall_and_lost_time() -> None:
    counts = dict.fromkeys(("batches", "samples", "steps", "tokens"), 0)

    def entry(train_us: tuple[int, int], wall_us: int, lost: object, ended: str) -> dict[str, Any]:
        return {
            "kind": "fit",
            "opened_unix_microseconds": 0,
            "world_size": 1,
            "global_batch_size": 0,
            "accumulation": 0,
            "start": {**counts, "microseconds": train_us[0]},
            "end": {**counts, "microseconds": train_us[1]},
            "microseconds": wall_us,
            "ended": ended,
            "lost": lost,
        }

    from tracker_core import Progress

    state = Progress().state_dict()
    lost = {**counts, "microseconds": 2_000_000}
    state["ledger"]["runs"] = [
        entry((0, 6_000_000), 8_000_000, lost, "crashed"),
        entry((6_000_000, 9_000_000), 4_000_000, dict.fromkeys((*counts, "microseconds"), 0), "completed"),
    ]
    facts = history_facts(state)
    assert facts["productive_seconds"] == 9.0 and facts["wall_seconds"] == 12.0 and facts["lost_seconds"] == 2.0
    assert facts["goodput"] == pytest.approx(9 / 14)


def test_history_of_a_damaged_ledger_exits_2_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from tracker_core import Tracker

    entry = Tracker().state_dict()
    entry["progress"]["ledger"]["runs"] = [{"kind": "fit"}]
    path = tmp_path / "plain.pt"
    torch.save({"progress_tracker": entry}, path)
    assert main(["history", str(path)]) == 2
    assert "ledger.runs.0" in capsys.readouterr().err
