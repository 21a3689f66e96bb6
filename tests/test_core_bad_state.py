"""Bad-state specifications: every malformed, inconsistent or foreign state is refused, naming the key.

Each refusal is a ProgressStateError whose ``key`` is the dotted path of the offending
entry, whose message names that key and the problem, and which leaves the live
Progress exactly as it was.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

import tracker_core.state._schema as schema
from tracker_core import SCHEMA_VERSION, Progress, ProgressStateError, reduce_state

from helpers.core_drive import ScriptBuilder, driven, in_fit_epoch, json_roundtrip, whole_epoch


def _rich_script():
    """Two fit runs; the second with 2 optimizers (one skipping), 2 train dataloaders and validation."""
    builder = ScriptBuilder()
    builder.fit(epochs=1, batches=3, accumulate=2, val_every=3, val_batches=2)
    builder.fit(epochs=2, batches=4, accumulate=3, optimizers=2, skip_every=2, train_dataloaders=2, val_every=2)
    return builder.script


def _rich_state() -> dict[str, Any]:
    """Mid second epoch of the second fit run, right after a train batch completed.

    Every scope differs there (epoch < run < lifetime), so each can be broken on its own.
    """
    script = _rich_script()
    second_run = [f for f in script.frames if f.kind == "run"][1]
    epochs = [
        f
        for f in script.frames
        if f.kind == "epoch" and f.stage == "train" and f.steps["ready"] > second_run.steps["ready"]
    ]
    batches = [
        f
        for f in script.frames
        if f.kind == "batch" and f.stage == "train" and f.steps["ready"] > epochs[1].steps["ready"]
    ]
    return driven(script, batches[1].steps["completed"] + 1).state_dict()


RICH = _rich_state()


@pytest.fixture
def state() -> dict[str, Any]:
    return copy.deepcopy(RICH)


def _live() -> Progress:
    """A live Progress with its own, different counts, to show a failed load changes none of them."""
    progress = in_fit_epoch(batches=1)
    whole_epoch(progress, "validate", batches=2)
    return progress


def _parent(state: dict[str, Any], path: str) -> tuple[Any, Any]:
    *parents, last = path.split(".")
    node: Any = state
    for name in parents:
        node = node[int(name)] if isinstance(node, list) else node[name]
    return node, int(last) if isinstance(node, list) else last


def put(state: dict[str, Any], path: str, value: object) -> dict[str, Any]:
    node, key = _parent(state, path)
    node[key] = value
    return state


def drop(state: dict[str, Any], path: str) -> dict[str, Any]:
    node, key = _parent(state, path)
    del node[key]
    return state


def phases(ready: int, started: int, processed: int, completed: int) -> dict[str, int]:
    return {"ready": ready, "started": started, "processed": processed, "completed": completed}


def assert_rejected(state: object, key: str, *words: str) -> ProgressStateError:
    live = _live()
    before = live.state_dict()
    with pytest.raises(ProgressStateError) as info:
        live.load_state_dict(state)  # type: ignore[arg-type]
    error = info.value
    assert error.key == key
    message = str(error)
    assert repr(key or "<root>") in message
    for word in words:
        assert word in message
    assert live.state_dict() == before
    return error


def test_the_base_state_of_these_tests_is_valid():
    progress = Progress()
    progress.load_state_dict(copy.deepcopy(RICH))
    assert progress.state_dict() == RICH
    stage = RICH["stages"]["train"]
    assert stage["samples"]["epoch"] < stage["samples"]["run"] < stage["samples"]["lifetime"]


def test_progress_state_error_is_a_value_error_carrying_the_key_and_the_problem():
    error = ProgressStateError("stages.train.samples", "negative count -1")
    assert isinstance(error, ValueError)
    assert (error.key, error.problem) == ("stages.train.samples", "negative count -1")
    assert str(error) == "progress state 'stages.train.samples': negative count -1"


# shape --------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [[], None, "state", 3, (1, 2)], ids=["list", "None", "str", "int", "tuple"])
def test_a_state_that_is_not_a_dict_is_refused_at_the_root(value):
    assert_rejected(value, "", "expected a dict, got", type(value).__name__)


def test_a_state_without_a_schema_version_is_refused(state):
    assert_rejected(drop(state, "schema_version"), "schema_version", "missing")


def test_a_state_missing_a_root_key_is_refused_naming_it(state):
    assert_rejected(drop(state, "run"), "run", "missing")


def test_a_state_missing_a_nested_key_is_refused_with_its_dotted_path(state):
    assert_rejected(drop(state, "stages.train.batches.epoch.ready"), "stages.train.batches.epoch.ready", "missing")


def test_a_dataloader_entry_missing_a_key_is_refused_with_its_index_in_the_path(state):
    assert_rejected(
        drop(state, "stages.validate.dataloaders.1.samples"), "stages.validate.dataloaders.1.samples", "missing"
    )


def test_a_where_missing_a_key_is_refused(state):
    assert_rejected(drop(state, "where.phase"), "where.phase", "missing")


def test_a_state_with_an_unknown_root_key_is_refused_naming_it(state):
    assert_rejected(put(state, "comment", "hi"), "comment", "unknown key")


def test_a_state_with_an_unknown_nested_key_is_refused_with_its_dotted_path(state):
    assert_rejected(
        put(state, "stages.train.batches.run.cancelled", 0), "stages.train.batches.run.cancelled", "unknown key"
    )


def test_a_state_with_an_unknown_stage_is_refused(state):
    assert_rejected(
        put(state, "stages.evaluate", copy.deepcopy(state["stages"]["test"])), "stages.evaluate", "unknown key"
    )


def test_an_evaluation_stage_with_train_only_keys_is_refused(state):
    assert_rejected(
        put(state, "stages.test.scheduler_steps", {"epoch": 0, "run": 0, "lifetime": 0}),
        "stages.test.scheduler_steps",
        "unknown key",
    )


def test_a_string_where_a_count_belongs_is_refused(state):
    assert_rejected(
        put(state, "stages.train.samples.run", "45"), "stages.train.samples.run", "expected an int, got str"
    )


def test_a_bool_where_a_count_belongs_is_refused(state):
    assert_rejected(
        put(state, "stages.validate.batches.run.completed", True),
        "stages.validate.batches.run.completed",
        "expected an int, got bool",
    )


def test_a_float_where_a_count_belongs_is_refused(state):
    assert_rejected(
        put(state, "stages.train.accumulating_batches", 0.0), "stages.train.accumulating_batches", "got float"
    )


def test_a_list_where_a_dict_belongs_is_refused(state):
    assert_rejected(put(state, "stages.train.batches", []), "stages.train.batches", "expected a dict, got list")


def test_a_dict_where_a_list_belongs_is_refused(state):
    assert_rejected(put(state, "stages.test.dataloaders", {}), "stages.test.dataloaders", "expected a list, got dict")


def test_a_dataloader_entry_that_is_not_a_dict_is_refused(state):
    assert_rejected(
        put(state, "stages.train.dataloaders.0", 5), "stages.train.dataloaders.0", "expected a dict, got int"
    )


def test_a_string_schema_version_is_refused(state):
    assert_rejected(put(state, "schema_version", "1"), "schema_version", "expected an int, got str")


def test_a_bool_schema_version_is_refused(state):
    assert_rejected(put(state, "schema_version", True), "schema_version", "expected an int, got bool")


def test_a_truncated_state_without_the_validate_stage_is_refused(state):
    assert_rejected(drop(state, "stages.validate"), "stages.validate", "missing")


def test_a_truncated_state_without_any_stages_is_refused(state):
    assert_rejected(drop(state, "stages"), "stages", "missing")


# counts -------------------------------------------------------------------------------
def test_a_negative_count_is_refused(state):
    assert_rejected(
        put(state, "stages.train.batches.lifetime.ready", -1),
        "stages.train.batches.lifetime.ready",
        "must be >= 0, got -1",
    )


def test_a_negative_tally_is_refused(state):
    assert_rejected(
        put(state, "stages.train.optimizer_steps.0.epoch", -2),
        "stages.train.optimizer_steps.0.epoch",
        "must be >= 0, got -2",
    )


def test_phases_out_of_order_are_refused(state):
    assert_rejected(
        put(state, "stages.train.epochs.lifetime", phases(3, 2, 3, 2)),
        "stages.train.epochs.lifetime",
        "phases out of order",
        "started 2 < processed 3",
    )


def test_two_events_in_flight_are_refused(state):
    assert_rejected(
        put(state, "stages.train.batches.lifetime", phases(9, 9, 7, 7)),
        "stages.train.batches.lifetime",
        "2 events in flight; at most 1 can be",
    )


def test_a_run_count_with_two_runs_in_flight_is_refused(state):
    state["run"].update(phases(3, 2, 1, 1))
    assert_rejected(state, "run", "2 events in flight")


def test_an_epoch_scope_above_the_run_scope_is_refused(state):
    assert_rejected(
        put(state, "stages.train.batches.epoch", phases(7, 7, 7, 7)),
        "stages.train.batches.epoch",
        "epoch scope above run scope",
    )


def test_a_tally_with_its_epoch_scope_above_its_run_scope_is_refused(state):
    assert_rejected(
        put(state, "stages.train.samples.epoch", 50), "stages.train.samples", "epoch scope 50 above run scope 45"
    )


def test_a_run_scope_above_the_lifetime_scope_is_refused(state):
    assert_rejected(
        put(state, "stages.train.epochs.run", phases(4, 4, 3, 3)),
        "stages.train.epochs.run",
        "run scope above lifetime scope",
    )


def test_a_tally_with_its_run_scope_above_its_lifetime_scope_is_refused(state):
    assert_rejected(
        put(state, "stages.train.optimizer_steps.1.run", 2),
        "stages.train.optimizer_steps.1",
        "run scope 2 above lifetime scope 1",
    )


def test_scopes_differing_by_different_amounts_across_phases_are_refused(state):
    assert_rejected(
        put(state, "stages.train.epochs.lifetime", phases(3, 3, 3, 2)),
        "stages.train.epochs.run",
        "run and lifetime scopes differ by different amounts across phases",
    )


def test_batch_scopes_differing_by_different_amounts_across_phases_are_refused(state):
    assert_rejected(
        put(state, "stages.train.batches.run", phases(6, 6, 6, 5)),
        "stages.train.batches.epoch",
        "epoch and run scopes differ by different amounts across phases",
    )


def test_dataloader_batches_adding_up_to_less_than_the_stages_processed_batches_are_refused(state):
    fewer = {scope: count - 1 for scope, count in state["stages"]["train"]["dataloaders"][1]["batches"].items()}
    assert_rejected(
        put(state, "stages.train.dataloaders.1.batches", fewer),
        "stages.train.dataloaders",
        "batches add up to 1 in epoch scope, but the stage has 2 processed batches",
    )


def test_a_dataloader_with_more_batches_than_the_stage_is_refused(state):
    # More in total is allowed (a combined batch reads several dataloaders), not more in one dataloader
    assert_rejected(
        put(state, "stages.train.dataloaders.1.batches.lifetime", 10),
        "stages.train.dataloaders",
        "a dataloader has more batches in lifetime scope than the stage's 9 processed batches",
    )


def test_a_dataloader_with_more_batches_before_the_run_than_the_stage_is_refused(state):
    # Loading rolls an unfinished run back to its start: no dataloader may then be beyond the stage
    assert_rejected(
        put(state, "stages.train.dataloaders.1.batches.lifetime", 7),
        "stages.train.dataloaders",
        "a dataloader has more batches before this run than the stage's 3 processed batches",
    )


def test_dataloader_samples_not_adding_up_to_the_stages_samples_are_refused(state):
    assert_rejected(
        put(state, "stages.validate.dataloaders.0.samples.epoch", 5),
        "stages.validate.dataloaders",
        "samples add up to 9 in epoch scope, but the stage has 8 samples",
    )


def test_no_dataloaders_for_a_stage_that_processed_batches_is_refused(state):
    assert_rejected(
        put(state, "stages.validate.dataloaders", []),
        "stages.validate.dataloaders",
        "no dataloaders, but 6 processed batches in lifetime scope",
    )


def test_optimizer_steps_and_skipped_steps_for_different_numbers_of_optimizers_are_refused(state):
    state["stages"]["train"]["optimizer_steps"].append({"epoch": 0, "run": 0, "lifetime": 0})
    assert_rejected(state, "stages.train.optimizer_steps_skipped", "2 optimizers, but optimizer_steps has 3")


def test_more_accumulating_batches_than_batches_ever_processed_are_refused(state):
    assert_rejected(
        put(state, "stages.train.accumulating_batches", 10),
        "stages.train.accumulating_batches",
        "10 exceeds the 9 batches ever processed",
    )


def test_a_batch_in_flight_outside_an_epoch_is_refused():
    builder = ScriptBuilder()
    builder.fit(epochs=1, batches=2)
    state = driven(builder.script).state_dict()
    for scope in ("epoch", "run", "lifetime"):
        counts = state["stages"]["train"]["batches"][scope]
        counts["ready"] += 1
        counts["started"] += 1
    assert_rejected(state, "stages.train.batches.lifetime", "a batch is in flight outside an epoch")


# run and where ------------------------------------------------------------------------
def test_an_unknown_run_kind_is_refused(state):
    assert_rejected(put(state, "run.kind", "train"), "run.kind", "unknown run kind 'train'")


def test_where_inconsistent_with_the_counts_is_refused(state):
    assert_rejected(
        put(state, "where.phase", "started"), "where", "says train batch started, but the batch counts are (9, 9, 9, 9)"
    )


def test_where_naming_an_event_that_never_happened_is_refused(state):
    put(state, "where", {"stage": "test", "event": "batch", "phase": "completed"})
    assert_rejected(state, "where", "says test batch completed, but the batch counts are (0, 0, 0, 0)")


def test_where_naming_an_unknown_stage_is_refused(state):
    assert_rejected(put(state, "where.stage", "eval"), "where.stage", "unknown stage 'eval'")


def test_where_naming_an_unknown_event_is_refused(state):
    assert_rejected(put(state, "where.event", "step"), "where.event", "unknown event 'step'")


def test_where_naming_an_unknown_phase_is_refused(state):
    assert_rejected(put(state, "where.phase", "done"), "where.phase", "unknown phase 'done' for the batch event")


def test_where_naming_an_epoch_cancelled_while_that_epoch_is_in_flight_is_refused(state):
    put(state, "where", {"stage": "train", "event": "epoch", "phase": "cancelled"})
    assert_rejected(state, "where", "says train epoch cancelled")


def test_where_giving_a_run_event_a_stage_is_refused(state):
    put(state, "where", {"stage": "train", "event": "run", "phase": "started"})
    assert_rejected(state, "where.stage", "a run event has no stage")


def test_where_with_a_field_that_is_not_a_string_is_refused(state):
    assert_rejected(put(state, "where.event", 1), "where.event", "expected a str, got int")


def test_where_that_is_not_a_dict_is_refused(state):
    assert_rejected(put(state, "where", None), "where", "expected a dict, got NoneType")


# schema versions ----------------------------------------------------------------------
def test_a_state_from_a_newer_schema_version_is_refused_saying_it_is_newer(state):
    assert_rejected(
        put(state, "schema_version", SCHEMA_VERSION + 1),
        "schema_version",
        f"version {SCHEMA_VERSION + 1} was written by a newer progress-tracker",
        f"reads up to {SCHEMA_VERSION}",
    )


@pytest.mark.parametrize("version", [4, 1, 0, -1])
def test_a_state_from_an_older_schema_version_is_refused_as_a_development_builds(state, version):
    assert_rejected(
        put(state, "schema_version", version),
        "schema_version",
        f"version {version} was written by a development build",
        f"reads version {SCHEMA_VERSION} only",
    )


@pytest.mark.parametrize("name", ["progress_v1.json", "progress_v2.json", "progress_v4.json"])
def test_a_real_state_of_a_development_build_is_refused_naming_its_version(name):
    """Versions 1 to 4 were written by development builds before 0.1.0; they are refused, not migrated."""
    old = json.loads((Path(__file__).parent / "data" / name).read_text())
    assert_rejected(old, "schema_version", f"version {old['schema_version']} was written by a development build")


# anomalies ---------------------------------------------------------------------------
def test_anomalies_that_are_not_a_list_are_refused(state):
    assert_rejected(put(state, "anomalies", "cut short"), "anomalies", "expected a list, got str")


def test_an_anomaly_that_is_not_a_str_is_refused(state):
    assert_rejected(put(state, "anomalies", ["ok", 3]), "anomalies.1", "expected a str, got int")


def test_more_anomalies_than_are_kept_are_refused(state):
    assert_rejected(put(state, "anomalies", ["x"] * 101), "anomalies", "101 anomalies; at most 100")


def test_an_anomaly_longer_than_is_kept_is_refused(state):
    assert_rejected(put(state, "anomalies", ["x" * 501]), "anomalies.0", "501 characters; an anomaly has at most 500")


def test_a_state_without_anomalies_is_refused(state):
    assert_rejected(drop(state, "anomalies"), "anomalies", "missing")


# a failed load keeps everything -------------------------------------------------------
def test_a_failed_load_keeps_a_pending_reentry_of_the_live_progress(state):
    progress = Progress()
    progress.load_state_dict(json_roundtrip(in_fit_epoch(batches=2).state_dict()))
    with pytest.raises(ProgressStateError):
        progress.load_state_dict(put(state, "stages.train.samples.run", -1))
    progress.run_ready("fit")
    progress.run_started()
    progress.train.epoch_ready()
    assert progress.view.run.counts.ready == 1
    assert progress.view.train.epochs.lifetime.ready == 1


def test_parse_reads_a_state_without_changing_it(state):
    snapshot = copy.deepcopy(state)
    schema.parse(state)
    assert state == snapshot


# 64-bit bounds -----------------------------------------------------------------------
def test_a_count_beyond_int64_is_refused_naming_its_key(state):
    lifetime = "stages.train.samples.lifetime"
    assert_rejected(put(state, lifetime, 2**63), lifetime, f"{2**63} is outside")


def test_a_count_at_the_int64_maximum_loads_and_reduces(state):
    big = 2**63 - 1
    state["stages"]["predict"]["samples"] = {"epoch": 0, "run": 0, "lifetime": big}
    state["stages"]["predict"]["dataloaders"] = [
        {"batches": {"epoch": 0, "run": 0, "lifetime": 0}, "samples": {"epoch": 0, "run": 0, "lifetime": big}}
    ]
    progress = Progress()
    progress.load_state_dict(state)
    assert reduce_state(progress)["stages"]["predict"]["samples"]["lifetime"] == big
