"""Counting specifications: every phase method, the ordering invariant, per-dataloader and per-optimizer counts."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tracker_core import (
    EventOrderError,
    PhaseCounts,
    Progress,
    ScopeCounts,
    StageProgress,
    TrainStageProgress,
)

from helpers.core_drive import check_invariants, driven, fit_script, in_fit_epoch, whole_batch, whole_epoch

STAGES = ("train", "validate", "test", "predict")
EVAL_KIND = {"train": "fit", "validate": "validate", "test": "test", "predict": "predict"}


def _in_run(stage: str) -> Progress:
    progress = Progress()
    progress.run_ready(EVAL_KIND[stage])
    progress.run_started()
    return progress


def _in_epoch(stage: str) -> Progress:
    progress = _in_run(stage)
    progress.stage(stage).epoch_ready()
    progress.stage(stage).epoch_started()
    return progress


def assert_refused(
    progress: Progress, error: type[Exception], mark: Callable[[], object], match: str | None = None
) -> None:
    """``mark`` raises ``error`` and the state is exactly what it was before."""
    before = progress.state_dict()
    with pytest.raises(error, match=match):
        mark()
    assert progress.state_dict() == before


# stages ----------------------------------------------------------------------------
def test_progress_has_a_train_stage_with_optimizer_counts_and_three_evaluation_stages():
    progress = Progress()
    assert isinstance(progress.train, TrainStageProgress)
    for name in ("validate", "test", "predict"):
        stage = progress.stage(name)
        assert type(stage) is StageProgress
        assert stage.name == name
        assert not hasattr(stage, "optimizer_step")


def test_stage_lookup_by_unknown_name_raises_key_error_naming_the_choices():
    with pytest.raises(KeyError, match="unknown stage 'training'"):
        Progress().stage("training")


def test_a_fresh_progress_counts_nothing_and_has_no_where():
    view = Progress().view
    zero = PhaseCounts(0, 0, 0, 0)
    assert view.run.counts == zero and view.run.kind == ""
    assert view.where is None
    for name in STAGES:
        stage = view.stage(name)
        assert tuple(stage.epochs) == (zero, zero)
        assert tuple(stage.batches) == (zero, zero, zero)
        assert stage.samples == ScopeCounts(0, 0, 0)
        assert stage.dataloaders == ()


# runs ------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["fit", "validate", "test", "predict"])
def test_run_phase_marks_count_one_run_per_phase_and_record_its_kind(kind):
    progress = Progress()
    progress.run_ready(kind)
    assert progress.view.run == (kind, PhaseCounts(1, 0, 0, 0))
    progress.run_started()
    assert progress.view.run.counts == PhaseCounts(1, 1, 0, 0)
    progress.run_processed()
    assert progress.view.run.counts == PhaseCounts(1, 1, 1, 0)
    progress.run_completed()
    assert progress.view.run == (kind, PhaseCounts(1, 1, 1, 1))


def test_run_ready_with_an_unknown_kind_raises_value_error_and_changes_nothing():
    progress = Progress()
    assert_refused(progress, ValueError, lambda: progress.run_ready("train"), "unknown run kind 'train'")


def test_run_ready_while_a_run_is_in_flight_raises_event_order_error_and_changes_nothing():
    progress = Progress()
    progress.run_ready("fit")
    progress.run_started()
    assert_refused(progress, EventOrderError, lambda: progress.run_ready("validate"), "run: ready")


@pytest.mark.parametrize(
    ("done", "mark", "problem"),
    [
        ((), "run_started", "started before it was ready"),
        (("run_ready",), "run_processed", "processed before it was started"),
        (("run_ready", "run_started"), "run_completed", "completed before it was processed"),
        (("run_ready",), "run_completed", "completed before it was processed"),
        (("run_ready", "run_started", "run_processed", "run_completed"), "run_started", "started before it was ready"),
    ],
    ids=[
        "started-before-ready",
        "processed-before-started",
        "completed-before-processed",
        "completed-right-after-ready",
        "started-after-the-run-completed",
    ],
)
def test_run_phase_marked_out_of_order_raises_event_order_error_and_changes_nothing(done, mark, problem):
    progress = Progress()
    for name in done:
        getattr(progress, name)(*(("fit",) if name == "run_ready" else ()))
    assert_refused(progress, EventOrderError, getattr(progress, mark), f"run: {problem}")


def test_run_started_on_a_fresh_progress_raises_event_order_error_and_changes_nothing():
    progress = Progress()
    assert_refused(progress, EventOrderError, progress.run_started, "run: started before it was ready")


# epochs ----------------------------------------------------------------------------
@pytest.mark.parametrize("stage", STAGES)
def test_epoch_phase_marks_count_one_epoch_per_phase_in_run_and_lifetime(stage):
    progress = _in_run(stage)
    s, view = progress.stage(stage), progress.view.stage(stage)
    expected = [PhaseCounts(1, 0, 0, 0), PhaseCounts(1, 1, 0, 0), PhaseCounts(1, 1, 1, 0), PhaseCounts(1, 1, 1, 1)]
    for mark, counts in zip((s.epoch_ready, s.epoch_started, s.epoch_processed, s.epoch_completed), expected):
        mark()
        assert view.epochs.run == counts
        assert view.epochs.lifetime == counts


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize(
    ("done", "mark", "problem"),
    [
        ((), "epoch_started", "started before it was ready"),
        (("epoch_ready",), "epoch_processed", "processed before it was started"),
        (("epoch_ready", "epoch_started"), "epoch_completed", "completed before it was processed"),
        (("epoch_ready",), "epoch_ready", "ready while the previous one is not completed"),
        (
            ("epoch_ready", "epoch_started", "epoch_processed"),
            "epoch_ready",
            "ready while the previous one is not completed",
        ),
    ],
    ids=[
        "started-before-ready",
        "processed-before-started",
        "completed-before-processed",
        "second-ready-while-one-in-flight",
        "ready-before-previous-completed",
    ],
)
def test_epoch_phase_marked_out_of_order_raises_event_order_error_and_changes_nothing(stage, done, mark, problem):
    progress = _in_run(stage)
    s = progress.stage(stage)
    for name in done:
        getattr(s, name)()
    assert_refused(progress, EventOrderError, getattr(s, mark), f"{stage} epoch: {problem}")


# batches ---------------------------------------------------------------------------
@pytest.mark.parametrize("stage", STAGES)
def test_batch_phase_marks_count_one_batch_per_phase_in_every_scope(stage):
    progress = _in_epoch(stage)
    s, view = progress.stage(stage), progress.view.stage(stage)
    marks = (s.batch_ready, s.batch_started, lambda: s.batch_processed(8), s.batch_completed)
    expected = [PhaseCounts(1, 0, 0, 0), PhaseCounts(1, 1, 0, 0), PhaseCounts(1, 1, 1, 0), PhaseCounts(1, 1, 1, 1)]
    for mark, counts in zip(marks, expected):
        mark()
        assert tuple(view.batches) == (counts, counts, counts)


def test_batch_completed_before_processed_raises_event_order_error_and_changes_nothing():
    progress = in_fit_epoch(batches=1)
    progress.train.batch_ready()
    progress.train.batch_started()
    assert_refused(
        progress, EventOrderError, progress.train.batch_completed, "train batch: completed before it was processed"
    )


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize(
    ("done", "mark", "problem"),
    [
        ((), "batch_started", "started before it was ready"),
        (("batch_ready",), "batch_processed", "processed before it was started"),
        (("batch_ready", "batch_started"), "batch_completed", "completed before it was processed"),
        (("batch_ready",), "batch_ready", "ready while the previous one is not completed"),
        (
            ("batch_ready", "batch_started", "batch_processed"),
            "batch_ready",
            "ready while the previous one is not completed",
        ),
        ((), "batch_processed", "processed before it was started"),
    ],
    ids=[
        "started-before-ready",
        "processed-before-started",
        "completed-before-processed",
        "second-ready-while-one-in-flight",
        "ready-before-previous-completed",
        "processed-with-nothing-fetched",
    ],
)
def test_batch_phase_marked_out_of_order_raises_event_order_error_and_changes_nothing(stage, done, mark, problem):
    progress = _in_epoch(stage)
    whole_batch(progress, stage)  # dataloader 0 exists, so only the order is at stake
    s = progress.stage(stage)
    for name in done:
        getattr(s, name)(*((8,) if name == "batch_processed" else ()))
    method = getattr(s, mark)
    assert_refused(
        progress,
        EventOrderError,
        (lambda: method(8)) if mark == "batch_processed" else method,
        f"{stage} batch: {problem}",
    )


def test_batch_processed_out_of_order_for_a_new_dataloader_index_changes_nothing():
    progress = in_fit_epoch()
    assert_refused(
        progress,
        EventOrderError,
        lambda: progress.train.batch_processed(8, dataloader=2),
        "processed before it was started",
    )


def test_batch_ready_outside_an_epoch_raises_event_order_error():
    progress = Progress()
    progress.run_ready("fit")
    progress.run_started()
    assert_refused(progress, EventOrderError, progress.train.batch_ready)


def test_batch_processed_counts_its_samples_in_every_scope():
    progress = in_fit_epoch(batches=1, samples=8)
    whole_batch(progress, "train", samples=5)
    assert progress.view.train.samples == ScopeCounts(13, 13, 13)


def test_a_batch_of_zero_samples_counts_as_a_batch_and_no_samples():
    progress = in_fit_epoch()
    whole_batch(progress, "train", samples=0)
    assert progress.view.train.batches.run.completed == 1
    assert progress.view.train.samples == ScopeCounts(0, 0, 0)


def test_batch_processed_with_negative_samples_raises_value_error_and_changes_nothing():
    progress = in_fit_epoch()
    progress.train.batch_ready()
    progress.train.batch_started()
    assert_refused(progress, ValueError, lambda: progress.train.batch_processed(-1), r"samples.* must be >= 0, got -1")


# cancel_batch ----------------------------------------------------------------------
@pytest.mark.parametrize("phases", [("batch_ready",), ("batch_ready", "batch_started")], ids=["ready", "started"])
def test_cancel_batch_undoes_a_batch_that_was_not_processed(phases):
    progress = in_fit_epoch(batches=2)
    for name in phases:
        getattr(progress.train, name)()
    progress.train.cancel_batch()
    assert progress.view.train.batches.epoch == PhaseCounts(2, 2, 2, 2)
    assert progress.view.train.batch_index == 1


def test_cancel_batch_is_recorded_in_where_as_cancelled():
    progress = in_fit_epoch()
    progress.train.batch_ready()
    progress.train.cancel_batch()
    assert progress.view.where == ("train", "batch", "cancelled")


def test_cancel_batch_lets_the_epoch_finish_early():
    progress = in_fit_epoch(batches=1)
    progress.train.batch_ready()
    progress.train.cancel_batch()
    progress.train.epoch_processed()
    progress.train.epoch_completed()
    assert progress.view.train.epochs.run == PhaseCounts(1, 1, 1, 1)


def test_cancel_batch_after_it_was_processed_raises_event_order_error_and_changes_nothing():
    progress = in_fit_epoch()
    progress.train.batch_ready()
    progress.train.batch_started()
    progress.train.batch_processed(8)
    assert_refused(progress, EventOrderError, progress.train.cancel_batch, "cannot cancel a processed batch")


# dataloaders -----------------------------------------------------------------------
def test_batches_and_samples_are_counted_per_dataloader():
    progress = _in_epoch("validate")
    for dataloader, samples in ((0, 4), (1, 3), (0, 4), (1, 2), (1, 1)):
        whole_batch(progress, "validate", samples, dataloader)
    first, second = progress.view.validate.dataloaders
    assert first.batches == ScopeCounts(2, 2, 2) and first.samples == ScopeCounts(8, 8, 8)
    assert second.batches == ScopeCounts(3, 3, 3) and second.samples == ScopeCounts(6, 6, 6)


def test_first_batch_from_a_higher_dataloader_index_adds_empty_counts_for_the_indexes_below():
    progress = _in_epoch("test")
    whole_batch(progress, "test", 4, dataloader=2)
    dataloaders = progress.view.test.dataloaders
    assert len(dataloaders) == 3
    assert dataloaders[0] == dataloaders[1] == (ScopeCounts(0, 0, 0), ScopeCounts(0, 0, 0))
    assert dataloaders[2] == (ScopeCounts(1, 1, 1), ScopeCounts(4, 4, 4))


def test_negative_dataloader_index_raises_value_error_and_changes_nothing():
    progress = in_fit_epoch()
    progress.train.batch_ready()
    progress.train.batch_started()
    assert_refused(
        progress,
        ValueError,
        lambda: progress.train.batch_processed(8, dataloader=-1),
        r"dataloader.* must be >= 0, got .*-1",
    )


# optimizer and scheduler steps -----------------------------------------------------
def test_optimizer_steps_are_counted_per_optimizer():
    progress = in_fit_epoch()
    for optimizer in (0, 1, 1, 1):
        progress.train.optimizer_step(optimizer)
    view = progress.view.train
    assert view.optimizer_steps_by_optimizer == (ScopeCounts(1, 1, 1), ScopeCounts(3, 3, 3))
    assert view.optimizer_steps == ScopeCounts(4, 4, 4)


def test_skipped_optimizer_steps_are_counted_apart_from_steps_taken():
    progress = in_fit_epoch()
    progress.train.optimizer_step(0)
    progress.train.optimizer_step_skipped(0)
    progress.train.optimizer_step_skipped(0)
    view = progress.view.train
    assert view.optimizer_steps == ScopeCounts(1, 1, 1)
    assert view.optimizer_steps_skipped == ScopeCounts(2, 2, 2)
    assert view.optimizer_steps_skipped_by_optimizer == (ScopeCounts(2, 2, 2),)


def test_first_step_of_a_higher_optimizer_index_adds_zero_counts_for_the_indexes_below_in_both_lists():
    progress = in_fit_epoch()
    progress.train.optimizer_step_skipped(2)
    view = progress.view.train
    assert view.optimizer_steps_by_optimizer == (ScopeCounts(0, 0, 0),) * 3
    assert view.optimizer_steps_skipped_by_optimizer == (ScopeCounts(0, 0, 0),) * 2 + (ScopeCounts(1, 1, 1),)


@pytest.mark.parametrize("method", ["optimizer_step", "optimizer_step_skipped"])
def test_negative_optimizer_index_raises_value_error_and_changes_nothing(method):
    progress = in_fit_epoch()
    assert_refused(
        progress, ValueError, lambda: getattr(progress.train, method)(-1), "optimizer index must be >= 0, got -1"
    )


def test_scheduler_steps_are_counted_in_every_scope():
    progress = in_fit_epoch()
    progress.train.scheduler_step()
    progress.train.scheduler_step()
    assert progress.view.train.scheduler_steps == ScopeCounts(2, 2, 2)


def test_optimizer_and_scheduler_steps_do_not_change_where():
    progress = in_fit_epoch(batches=1)
    progress.train.optimizer_step()
    progress.train.optimizer_step_skipped()
    progress.train.scheduler_step()
    assert progress.view.where == ("train", "batch", "completed")


# gradient accumulation -------------------------------------------------------------
def _accumulating_batch(progress: Progress, step: bool) -> None:
    train = progress.train
    train.batch_ready()
    train.batch_started()
    if step:
        train.optimizer_step()
    train.batch_processed(8)
    train.batch_completed()


def test_accumulating_batches_counts_batches_processed_since_the_last_optimizer_step():
    progress = in_fit_epoch()
    seen = []
    for step in (False, False, True, False):
        _accumulating_batch(progress, step)
        seen.append((progress.view.train.accumulating_batches, progress.view.is_mid_accumulation))
    assert seen == [(1, True), (2, True), (0, False), (1, True)]


def test_a_batch_is_not_accumulating_before_it_is_processed():
    progress = in_fit_epoch()
    progress.train.batch_ready()
    progress.train.batch_started()
    assert progress.view.train.accumulating_batches == 0


def test_an_optimizer_step_taken_while_a_batch_is_processed_applies_that_batch_too():
    progress = in_fit_epoch(batches=2)
    progress.train.batch_ready()
    progress.train.batch_started()
    progress.train.optimizer_step()
    assert progress.view.train.accumulating_batches == 0
    progress.train.batch_processed(8)
    assert progress.view.train.accumulating_batches == 0
    assert not progress.view.is_mid_accumulation


def test_a_skipped_optimizer_step_also_ends_the_accumulation_window():
    progress = in_fit_epoch(batches=2)
    progress.train.batch_ready()
    progress.train.batch_started()
    progress.train.optimizer_step_skipped()
    progress.train.batch_processed(8)
    assert progress.view.train.accumulating_batches == 0


def test_accumulation_windows_straddle_epoch_boundaries():
    """Accumulate 3 over epochs of 4 batches: steps fall on lifetime batches 3, 6, 9, 12."""
    progress = Progress()
    progress.run_ready("fit")
    progress.run_started()
    at_epoch_end = []
    seen = []
    n = 0
    for _ in range(3):
        progress.train.epoch_ready()
        progress.train.epoch_started()
        for _ in range(4):
            n += 1
            _accumulating_batch(progress, step=n % 3 == 0)
            seen.append(progress.view.train.accumulating_batches)
        progress.train.epoch_processed()
        progress.train.epoch_completed()
        at_epoch_end.append((progress.view.train.accumulating_batches, progress.view.is_mid_accumulation))
    assert seen == [1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0]
    assert at_epoch_end == [(1, True), (2, True), (0, False)]
    assert progress.view.train.optimizer_steps == ScopeCounts(2, 4, 4)


def test_evaluation_batches_do_not_accumulate_gradients():
    progress = in_fit_epoch()
    _accumulating_batch(progress, step=False)
    whole_epoch(progress, "validate", batches=3)
    assert progress.view.train.accumulating_batches == 1


# the ordering invariant at every instant -------------------------------------------
def test_ordering_and_scope_invariants_hold_after_every_step_of_a_fit_with_validation_and_accumulation():
    script = fit_script(epochs=2, batches=4, accumulate=3, optimizers=2, skip_every=2, train_dataloaders=2)
    progress = Progress()
    check_invariants(progress)
    for step in script.steps:
        for call in step.calls:
            call(progress)
        check_invariants(progress)
    assert progress.state_dict() == driven(script).state_dict()


# fused batch marks -------------------------------------------------------------------------


@pytest.mark.parametrize("stage", STAGES)
def test_batch_begin_and_batch_end_leave_the_same_state_as_the_four_phase_marks(stage):
    fused, phased = _in_epoch(stage), _in_epoch(stage)
    for samples, dataloader in ((4, 0), (3, 1)):
        fused.stage(stage).batch_begin()
        phased.stage(stage).batch_ready()
        phased.stage(stage).batch_started()
        assert fused.state_dict() == phased.state_dict()
        fused.stage(stage).batch_end(samples, dataloader)
        phased.stage(stage).batch_processed(samples, dataloader)
        phased.stage(stage).batch_completed()
        assert fused.state_dict() == phased.state_dict()


@pytest.mark.parametrize(
    ("done", "mark", "problem"),
    [
        ((), "batch_end", "processed before it was started"),
        (("batch_begin",), "batch_begin", "ready while the previous one is not completed"),
        (("batch_ready", "batch_started", "batch_processed"), "batch_end", "processed again before it was completed"),
    ],
    ids=["end-with-nothing-begun", "second-begin-while-one-in-flight", "end-after-processed"],
)
def test_fused_batch_marks_out_of_order_raise_event_order_error_and_change_nothing(done, mark, problem):
    progress = in_fit_epoch()
    train = progress.train
    for name in done:
        getattr(train, name)(*((8,) if name == "batch_processed" else ()))
    method = getattr(train, mark)
    assert_refused(
        progress, EventOrderError, (lambda: method(8)) if mark == "batch_end" else method, f"train batch: {problem}"
    )


def test_batch_begin_outside_an_epoch_raises_event_order_error():
    progress = Progress()
    progress.run_ready("fit")
    progress.run_started()
    assert_refused(progress, EventOrderError, progress.train.batch_begin, "ready outside an epoch")


def test_batch_end_refuses_negative_samples_and_changes_nothing():
    progress = in_fit_epoch()
    progress.train.batch_begin()
    assert_refused(progress, ValueError, lambda: progress.train.batch_end(-1))
