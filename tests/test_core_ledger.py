"""The run ledger: one entry per run (or resumed stretch of a run) in the saved progress state (docs/schema.md)."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import torch

from tracker_core import Progress, ProgressStateError
from tracker_core.counting import _clock
from tracker_core.state._ledger import MAX_LEDGER_RUNS

from helpers.clock import TickingClock
from helpers.core_drive import in_fit_epoch, json_roundtrip, whole_batch, whole_epoch, whole_run


def _ledger(progress: Progress) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = progress.state_dict()["ledger"]["runs"]
    return runs


def _fit_with_steps(progress: Progress, batches: int, accumulate: int, samples: int = 8) -> None:
    progress.run_ready("fit")
    progress.run_started()
    progress.train.epoch_ready()
    progress.train.epoch_started()
    for batch in range(1, batches + 1):
        whole_batch(progress, "train", samples)
        if batch % accumulate == 0:
            progress.train.optimizer_step()


def _restored(progress: Progress) -> Progress:
    fresh = Progress()
    fresh.load_state_dict(json_roundtrip(progress.state_dict()))
    return fresh


def test_a_completed_fit_is_one_completed_entry_with_its_train_counts_batch_size_and_accumulation() -> None:
    progress = Progress()
    _fit_with_steps(progress, batches=6, accumulate=3, samples=4)
    progress.train.epoch_processed()
    progress.train.epoch_completed()
    progress.run_processed()
    progress.run_completed()
    (entry,) = _ledger(progress)
    assert entry["kind"] == "fit" and entry["ended"] == "completed" and entry["world_size"] == 1
    assert entry["start"] == {"batches": 0, "samples": 0, "steps": 0, "tokens": 0, "microseconds": 0}
    assert {k: entry["end"][k] for k in ("batches", "samples", "steps")} == {"batches": 6, "samples": 24, "steps": 2}
    assert (entry["global_batch_size"], entry["accumulation"]) == (4, 3)
    assert entry["lost"] == {"batches": 0, "samples": 0, "steps": 0, "tokens": 0, "microseconds": 0}


def test_the_running_entry_holds_the_counts_and_wall_time_at_each_save(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = TickingClock()
    monkeypatch.setattr(_clock, "now_us", clock)
    progress = in_fit_epoch(batches=2)
    clock.advance(1.5)
    (entry,) = _ledger(progress)
    assert entry["ended"] == "running"
    assert entry["end"]["batches"] == 2 and entry["microseconds"] == 1_500_000


def test_resuming_a_saved_open_run_records_it_as_crashed_with_unknown_lost_work_and_opens_a_new_entry() -> None:
    progress = in_fit_epoch(batches=3)
    resumed = _restored(progress)
    assert _ledger(resumed) == _ledger(progress)  # loading alone changes nothing
    resumed.run_ready("fit")
    resumed.run_started()
    crashed, again = _ledger(resumed)
    assert crashed["ended"] == "crashed" and crashed["lost"] == "unknown"
    assert again["ended"] == "running" and again["start"] == crashed["end"]


def test_re_entering_the_same_run_twice_opens_one_entry() -> None:
    resumed = _restored(in_fit_epoch(batches=1))
    resumed.run_ready("fit")
    resumed.run_ready("fit")
    resumed.run_started()
    assert [entry["ended"] for entry in _ledger(resumed)] == ["crashed", "running"]


def test_a_new_run_after_loading_an_open_one_records_the_open_one_as_crashed() -> None:
    resumed = _restored(in_fit_epoch(batches=1))
    whole_run(resumed, "validate", epochs=1, batches=1)
    assert [(e["kind"], e["ended"]) for e in _ledger(resumed)] == [("fit", "crashed"), ("validate", "completed")]


def test_a_run_told_to_stop_early_ends_stopped_early() -> None:
    progress = in_fit_epoch(batches=1)
    progress.note_run_end("stopped_early")
    progress.train.epoch_processed()
    progress.train.epoch_completed()
    progress.run_processed()
    progress.run_completed()
    assert _ledger(progress)[-1]["ended"] == "stopped_early"


@pytest.mark.parametrize("ended", ["interrupted", "crashed"])
def test_an_exception_ends_the_entry_at_once_and_a_resume_of_its_checkpoint_opens_another(ended: str) -> None:
    progress = in_fit_epoch(batches=1)
    progress.note_run_end(ended)
    assert _ledger(progress)[-1]["ended"] == ended  # a checkpoint written after the exception says so
    resumed = _restored(progress)
    resumed.run_ready("fit")
    assert [entry["ended"] for entry in _ledger(resumed)] == [ended, "running"]


def test_an_unknown_run_ending_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown run ending 'done'"):
        Progress().note_run_end("done")


def test_the_ledger_keeps_the_last_runs_and_sums_the_older_ones() -> None:
    progress = Progress()
    for _ in range(MAX_LEDGER_RUNS + 2):
        whole_run(progress, "fit", epochs=1, batches=1)
    ledger = progress.state_dict()["ledger"]
    assert len(ledger["runs"]) == MAX_LEDGER_RUNS
    assert ledger["earlier"]["runs"] == 2
    assert ledger["runs"][0]["start"]["batches"] == 2


def test_the_ledger_survives_json_and_a_weights_only_torch_load() -> None:
    progress = _restored(in_fit_epoch(batches=2))
    progress.run_ready("fit")
    state = progress.state_dict()
    assert json.loads(json.dumps(state))["ledger"] == state["ledger"]
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True)["ledger"] == state["ledger"]


def _saved() -> dict[str, Any]:
    progress = in_fit_epoch(batches=1)
    whole_epoch(progress, "validate", batches=1)
    return progress.state_dict()


@pytest.mark.parametrize(
    ("path", "value", "key", "words"),
    [
        ("ledger", [], "ledger", "expected a dict"),
        ("ledger.runs", {}, "ledger.runs", "expected a list"),
        ("ledger.runs.0.kind", "train", "ledger.runs.0.kind", "unknown run kind"),
        ("ledger.runs.0.world_size", 0, "ledger.runs.0.world_size", ""),
        ("ledger.runs.0.end.batches", -1, "ledger.runs.0.end.batches", ""),
        ("ledger.runs.0.ended", "finished", "ledger.runs.0.ended", "unknown ending"),
        ("ledger.runs.0.lost", "lots", "ledger.runs.0.lost", "expected a dict"),
        ("ledger.runs.0.lost.batches", 3, "ledger.runs.0.lost", "expected 0 counts"),
        ("ledger.earlier.runs", "2", "ledger.earlier.runs", "expected an int"),
    ],
)
def test_a_bad_ledger_is_refused_naming_the_key_and_changes_nothing(
    path: str, value: object, key: str, words: str
) -> None:
    state = _saved()
    *parents, last = path.split(".")
    node: Any = state
    for name in parents:
        node = node[int(name)] if isinstance(node, list) else node[name]
    node[last] = value
    live = in_fit_epoch(batches=2)
    before = live.state_dict()
    with pytest.raises(ProgressStateError) as info:
        live.load_state_dict(state)
    assert info.value.key == key and words in str(info.value)
    assert live.state_dict() == before


def test_an_end_below_the_start_is_refused() -> None:
    state = _saved()
    state["ledger"]["runs"][0]["start"]["samples"] = 100
    with pytest.raises(ProgressStateError, match="below the start's 100") as info:
        Progress().load_state_dict(state)
    assert info.value.key == "ledger.runs.0.end.samples"


def test_only_the_last_entry_can_be_running() -> None:
    state = _saved()
    state["ledger"]["runs"].insert(0, dict(state["ledger"]["runs"][0]))
    with pytest.raises(ProgressStateError, match="only the last run") as info:
        Progress().load_state_dict(state)
    assert info.value.key == "ledger.runs.0.ended"
