"""Anomalies: what happened that the record could not follow, noted by the owner, saved, shown and migrated."""

from __future__ import annotations

import warnings

import pytest

from tracker_core import Progress, reduce_state
from tracker_core.display._report import progress_facts, progress_table

from helpers.core_drive import in_fit_epoch, json_roundtrip


def test_a_noted_anomaly_is_in_the_view_oldest_first() -> None:
    progress = in_fit_epoch(batches=1)
    progress.note_anomaly("validation cut by an exception at batch 3")
    progress.note_anomaly("train epoch re-entered by another run")
    assert progress.view.anomalies == (
        "validation cut by an exception at batch 3",
        "train epoch re-entered by another run",
    )


def test_a_fresh_progress_has_no_anomalies() -> None:
    assert Progress().view.anomalies == ()
    assert Progress().state_dict()["anomalies"] == []


def test_noting_an_anomaly_changes_no_count() -> None:
    progress = in_fit_epoch(batches=2)
    before = progress.state_dict()
    progress.note_anomaly("something odd")
    assert {**progress.state_dict(), "anomalies": []} == before


def test_only_the_last_100_anomalies_are_kept() -> None:
    progress = Progress()
    for i in range(105):
        progress.note_anomaly(f"anomaly {i}")
    assert progress.view.anomalies == tuple(f"anomaly {i}" for i in range(5, 105))


def test_an_adapters_first_anomaly_warns_naming_its_framework_and_the_later_ones_do_not() -> None:
    progress = Progress()
    progress.note_anomaly("not warned: no framework named")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        progress.note_anomaly("batch began out of order", framework="Ignite")
        progress.note_anomaly("a second one", framework="Ignite")
    assert [str(w.message) for w in caught] == [
        "tracker-core (Ignite): batch began out of order; recorded in view.anomalies (further anomalies are "
        "recorded without a warning)"
    ]
    assert caught[0].category is RuntimeWarning
    assert len(progress.view.anomalies) == 3


def test_a_long_anomaly_is_cut_to_500_characters_marked_as_cut() -> None:
    progress = Progress()
    progress.note_anomaly("x" * 600)
    (message,) = progress.view.anomalies
    assert len(message) == 500 and message.endswith("...")


def test_an_anomaly_that_is_not_a_str_is_refused() -> None:
    with pytest.raises(TypeError, match="an anomaly is a str, got int"):
        Progress().note_anomaly(3)  # type: ignore[arg-type]


def test_anomalies_are_saved_and_loaded_back_through_json() -> None:
    progress = in_fit_epoch(batches=1)
    progress.note_anomaly("validation cut by an exception at batch 3")
    loaded = Progress()
    loaded.load_state_dict(json_roundtrip(progress.state_dict()))
    assert loaded.view.anomalies == ("validation cut by an exception at batch 3",)


def test_loading_a_state_replaces_the_live_anomalies() -> None:
    progress = Progress()
    progress.note_anomaly("before the load")
    progress.load_state_dict(in_fit_epoch(batches=1).state_dict())
    assert progress.view.anomalies == ()


def test_reduce_state_reports_this_ranks_anomalies() -> None:
    progress = in_fit_epoch(batches=1)
    progress.note_anomaly("validation cut by an exception at batch 3")
    assert reduce_state(progress)["anomalies"] == ["validation cut by an exception at batch 3"]


def test_progress_facts_list_the_anomalies() -> None:
    progress = in_fit_epoch(batches=1)
    progress.note_anomaly("validation cut by an exception at batch 3")
    assert progress_facts(progress.state_dict())["anomalies"] == ["validation cut by an exception at batch 3"]


def test_progress_table_shows_each_anomaly_on_its_own_line() -> None:
    progress = in_fit_epoch(batches=1)
    progress.note_anomaly("validation cut by an exception at batch 3")
    progress.note_anomaly("a second one")
    lines = progress_table(progress.state_dict()).splitlines()
    assert lines[-3:] == ["anomalies: 2", "  - validation cut by an exception at batch 3", "  - a second one"]


def test_progress_table_says_there_are_no_anomalies() -> None:
    assert progress_table(in_fit_epoch(batches=1).state_dict()).splitlines()[-1] == "anomalies: none"
