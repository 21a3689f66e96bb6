"""Round-trip specifications: state_dict is plain data that loads back to the same state."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import torch

from tracker_core import SCHEMA_VERSION, Progress

from helpers.core_drive import (
    driven,
    fit_script,
    in_fit_epoch,
    json_roundtrip,
    nothing_to_settle,
    plain_data_problems,
    states_along,
    whole_epoch,
    whole_run,
)

SCRIPT = fit_script(epochs=2, batches=4, accumulate=3, optimizers=2, skip_every=2, train_dataloaders=2)


def _reloaded(state: dict[str, Any]) -> dict[str, Any]:
    progress = Progress()
    progress.load_state_dict(state)
    return progress.state_dict()


QUIET_CUTS = [cut for cut, state in enumerate(states_along(SCRIPT)) if nothing_to_settle(state)]


# json ---------------------------------------------------------------------------------
def test_state_dict_of_a_fresh_progress_round_trips_through_json():
    state = Progress().state_dict()
    assert _reloaded(json_roundtrip(state)) == state


def test_state_dict_after_a_finished_fit_round_trips_through_json():
    state = driven(SCRIPT).state_dict()
    assert _reloaded(json_roundtrip(state)) == state


def test_state_dict_between_runs_of_different_kinds_round_trips_through_json():
    progress = Progress()
    whole_run(progress, "fit", epochs=2)
    whole_run(progress, "test", epochs=1, batches=3)
    state = progress.state_dict()
    assert _reloaded(json_roundtrip(state)) == state


def test_state_dict_between_train_batches_mid_epoch_round_trips_through_json():
    progress = in_fit_epoch(batches=3)
    state = progress.state_dict()
    assert _reloaded(json_roundtrip(state)) == state


def test_state_dict_at_every_instant_with_nothing_to_settle_round_trips_through_json():
    assert len(QUIET_CUTS) > 15  # the script has many such instants; this is not a vacuous check
    for cut in QUIET_CUTS:
        state = driven(SCRIPT, cut).state_dict()
        assert _reloaded(json_roundtrip(state)) == state, f"cut {cut}: {SCRIPT.steps[cut - 1].label}"


def test_state_dict_mid_accumulation_window_round_trips_the_accumulating_batches():
    progress = in_fit_epoch(batches=2)
    state = progress.state_dict()
    assert state["stages"]["train"]["accumulating_batches"] == 2
    fresh = Progress()
    fresh.load_state_dict(json_roundtrip(state))
    assert fresh.view.train.accumulating_batches == 2
    assert fresh.view.is_mid_accumulation


def test_loading_a_state_replaces_every_count_of_a_progress_already_in_use():
    state = driven(SCRIPT, QUIET_CUTS[len(QUIET_CUTS) // 2]).state_dict()
    used = Progress()
    whole_run(used, "predict", epochs=2, batches=5)
    whole_run(used, "fit", epochs=3, batches=2)
    used.load_state_dict(state)
    assert used.state_dict() == state


def test_loading_the_state_of_a_fresh_progress_empties_a_used_one():
    used = Progress()
    whole_run(used, "fit", epochs=1)
    used.load_state_dict(Progress().state_dict())
    assert used.state_dict() == Progress().state_dict()
    assert used.view.where is None


def test_counting_continues_from_a_loaded_state():
    progress = in_fit_epoch(batches=2)
    fresh = Progress()
    fresh.load_state_dict(json_roundtrip(progress.state_dict()))
    whole_epoch(fresh, "validate", batches=1)
    whole_epoch(progress, "validate", batches=1)
    assert fresh.state_dict() == progress.state_dict()


# torch.save ---------------------------------------------------------------------------
def test_state_dict_saves_with_torch_and_loads_with_weights_only():
    state = driven(SCRIPT, QUIET_CUTS[-3]).state_dict()
    buffer = io.BytesIO()
    torch.save({"progress": state}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)["progress"]
    assert loaded == state
    assert _reloaded(loaded) == state


# plain data ---------------------------------------------------------------------------
@pytest.mark.parametrize("cut", [0, len(SCRIPT) // 3, len(SCRIPT) // 2, len(SCRIPT)])
def test_state_dict_holds_only_dicts_lists_strings_ints_and_bools(cut):
    state = driven(SCRIPT, cut).state_dict()
    assert plain_data_problems(state) == []
    assert json.loads(json.dumps(state)) == state


def test_state_dict_records_the_schema_version():
    assert Progress().state_dict()["schema_version"] == SCHEMA_VERSION == 5


def test_state_dict_has_every_stage_with_epochs_batches_samples_and_dataloaders_and_train_steps():
    state = driven(SCRIPT).state_dict()
    assert set(state) == {"schema_version", "where", "run", "stages", "microseconds", "anomalies", "ledger"}
    assert set(state["run"]) == {"kind", "ready", "started", "processed", "completed"}
    assert set(state["stages"]) == {"train", "validate", "test", "predict"}
    for name in ("validate", "test", "predict"):
        assert set(state["stages"][name]) == {
            "epochs",
            "batches",
            "samples",
            "tokens",
            "non_padding_tokens",
            "dataloaders",
            "microseconds",
        }
    assert set(state["stages"]["train"]) == {
        "epochs",
        "batches",
        "samples",
        "tokens",
        "non_padding_tokens",
        "dataloaders",
        "optimizer_steps",
        "optimizer_steps_skipped",
        "scheduler_steps",
        "accumulating_batches",
        "microseconds",
    }
    assert set(state["stages"]["train"]["epochs"]) == {"run", "lifetime"}
    assert set(state["stages"]["train"]["batches"]) == {"epoch", "run", "lifetime"}


def test_state_dict_of_a_fresh_progress_has_an_empty_where():
    assert Progress().state_dict()["where"] == {}


def test_state_dict_is_a_new_copy_each_time_so_editing_it_changes_nothing():
    progress = in_fit_epoch(batches=2)
    state = progress.state_dict()
    before = json.dumps(state, sort_keys=True)
    state["stages"]["train"]["batches"]["epoch"]["ready"] = 99
    state["stages"]["train"]["dataloaders"].clear()
    state["where"]["phase"] = "ready"
    assert json.dumps(progress.state_dict(), sort_keys=True) == before


def test_loading_a_state_does_not_keep_a_reference_to_it():
    progress = in_fit_epoch(batches=2)
    state = json_roundtrip(progress.state_dict())
    fresh = Progress()
    fresh.load_state_dict(state)
    state["stages"]["train"]["dataloaders"].clear()
    state["run"]["ready"] = 7
    assert fresh.state_dict() == progress.state_dict()
