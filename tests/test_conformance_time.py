"""Time fields in all three frameworks, with the real clock: the same fields, timed in the same stages
and scopes, in scope order, never running back from one checkpoint to the next or across a resume; the
run ledger's times too (each entry's wall and train time, present in the same entries, in order). Values
differ between runs and are not compared."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("ignite")
pytest.importorskip("accelerate")
pytest.importorskip("numpy")

import torch

from tracker_core.checkpoints import CheckpointFileError, read_checkpoint
from tracker_core.counting import _clock

from helpers.clock import REAL_NOW_US
from helpers.conformance import FRAMEWORKS, Outcome, Saving, Scenario, run, stop_checkpoint
from helpers.time_fields import ledger_time_fields, ledger_went_back, out_of_order, time_fields, went_back

pytestmark = [
    pytest.mark.filterwarnings("ignore:'set_vital' is deprecated"),
    pytest.mark.filterwarnings("ignore::UserWarning:pytorch_lightning"),
    pytest.mark.filterwarnings("ignore::UserWarning:lightning_fabric"),
]

SCENARIO = Scenario("validate-every-epoch", samples=10, batch_size=3, epochs=2, validate_every=4, stop=(1, 2))


@pytest.fixture(autouse=True)
def real_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_clock, "now_us", REAL_NOW_US)


def _saved_progress(framework: str, path: Path) -> dict[str, Any]:
    if framework == "lightning":
        return torch.load(path, weights_only=True)["callbacks"]["ProgressTracker"]["progress"]  # type: ignore[no-any-return]
    if framework == "ignite":
        return torch.load(path, weights_only=True)["progress"]["progress_tracker"]["progress"]  # type: ignore[no-any-return]
    return torch.load(path / "progress_tracker_0.pt", weights_only=True)["tracker"]["progress"]  # type: ignore[no-any-return]


def test_uninterrupted_runs_record_the_same_time_fields_in_all_three_frameworks() -> None:
    states = [run(framework, SCENARIO).progress for framework in FRAMEWORKS]
    assert time_fields(states[0]).keys() == time_fields(states[1]).keys() == time_fields(states[2]).keys()
    for state in states:
        assert out_of_order(state) == []
        assert state["stages"]["train"]["microseconds"]["lifetime"] > 0
        assert state["stages"]["validate"]["microseconds"]["lifetime"] > 0
        assert state["stages"]["test"]["microseconds"]["lifetime"] == 0


def test_the_three_frameworks_time_the_same_stages_and_scopes_and_ledger_entries() -> None:
    scenario = Scenario("fit-then-test", samples=8, batch_size=2, validate_every=2, test_after=True, stop=(0, 1))
    states = [run(f, scenario).progress for f in FRAMEWORKS]
    timed = [{key for key, us in {**time_fields(s), **ledger_time_fields(s)}.items() if us > 0} for s in states]
    assert timed[0] == timed[1] == timed[2]
    assert {"ledger.runs.0.microseconds", "ledger.runs.0.end.microseconds", "ledger.runs.1.microseconds"} <= timed[0]
    assert all(ledger_went_back(state) == [] for state in states)
    assert {"stages.train.microseconds.lifetime", "stages.validate.microseconds.lifetime"} <= timed[0]
    assert "stages.test.microseconds.lifetime" in timed[0]
    assert not any(key.startswith("stages.predict") for key in timed[0])


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_the_checkpoints_of_one_run_never_show_a_time_going_back(framework: str, tmp_path: Path) -> None:
    run(framework, SCENARIO, saving=Saving(tmp_path, every_batch=True))
    found = [
        path for path in tmp_path.rglob("*") if path.suffix in (".ckpt", ".pt") or path.name.startswith("checkpoint_")
    ]
    states = []
    for path in found:
        try:
            states.append(read_checkpoint(path).entries[0]["progress"])
        except CheckpointFileError:
            continue  # a file inside an Accelerate folder, read with its folder
    states.sort(key=lambda state: state["stages"]["train"]["batches"]["lifetime"]["processed"])
    assert len(states) >= 3
    for before, after in itertools.pairwise(states):
        assert out_of_order(after) == []
        assert went_back(before, after) == []
    assert (
        time_fields(states[-1])["stages.train.microseconds.lifetime"]
        > time_fields(states[0])["stages.train.microseconds.lifetime"]
    )


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_resumed_run_times_on_from_its_checkpoint(framework: str, tmp_path: Path) -> None:
    run(framework, SCENARIO, saving=Saving(tmp_path))
    saved = _saved_progress(framework, stop_checkpoint(framework, tmp_path))
    resumed: Outcome = run(framework, SCENARIO, resume_from=stop_checkpoint(framework, tmp_path), seed=1234)
    assert saved["microseconds"]["checkpoint_save"]["lifetime"] > 0
    assert saved["stages"]["train"]["microseconds"]["lifetime"] > 0
    assert went_back(saved, resumed.progress) == []
    assert out_of_order(resumed.progress) == []
    assert resumed.progress["microseconds"]["checkpoint_restore"]["lifetime"] > 0
    assert ledger_went_back(resumed.progress) == []
    stopped, continued = resumed.progress["ledger"]["runs"]
    assert stopped["microseconds"] > 0 and stopped["end"]["microseconds"] > 0  # as the checkpoint held them
    assert continued["microseconds"] > 0 and continued["end"]["microseconds"] > continued["start"]["microseconds"]
    assert continued["start"]["microseconds"] == stopped["end"]["microseconds"]
    assert (
        resumed.progress["stages"]["train"]["microseconds"]["lifetime"]
        > (saved["stages"]["train"]["microseconds"]["lifetime"])
    )
