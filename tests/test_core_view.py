"""View specifications: derived figures, `where`, read-only access and the get_progress accessor."""

from __future__ import annotations

import gc
import weakref

import pytest

from tracker_core import (
    BatchCounts,
    DataloaderCounts,
    EpochCounts,
    PhaseCounts,
    Progress,
    ProgressView,
    RunCounts,
    ScopeCounts,
    StageView,
    TrainStageView,
    Where,
    get_progress,
)
from tracker_core.adapter import register_progress as attach

from helpers.core_drive import in_fit_epoch, whole_batch, whole_epoch, whole_run


# stage views ------------------------------------------------------------------------
def test_progress_view_has_one_view_per_stage_and_the_train_view_counts_optimizer_steps():
    view = Progress().view
    assert isinstance(view, ProgressView)
    assert isinstance(view.train, TrainStageView)
    assert view.stage("train") is view.train
    for name in ("validate", "test", "predict"):
        assert type(view.stage(name)) is StageView
        assert view.stage(name).name == name
        assert getattr(view, name).name == name


def test_view_stage_with_an_unknown_name_raises_key_error():
    with pytest.raises(KeyError, match="unknown stage 'eval'"):
        Progress().view.stage("eval")


def test_view_reflects_marks_made_after_it_was_taken():
    progress = in_fit_epoch()
    view, train_view = progress.view, progress.view.train
    whole_batch(progress, "train", samples=6)
    assert train_view.samples == ScopeCounts(6, 6, 6)
    assert view.where == ("train", "batch", "completed")


def test_view_counts_come_as_named_tuples_of_each_scope():
    progress = in_fit_epoch(batches=1)
    view = progress.view
    assert isinstance(view.train.epochs, EpochCounts)
    assert isinstance(view.train.batches, BatchCounts)
    assert isinstance(view.train.batches.epoch, PhaseCounts)
    assert isinstance(view.train.samples, ScopeCounts)
    assert isinstance(view.train.dataloaders, tuple)
    assert isinstance(view.train.dataloaders[0], DataloaderCounts)
    assert isinstance(view.train.optimizer_steps, ScopeCounts)
    assert isinstance(view.run, RunCounts)
    assert isinstance(view.where, Where)


def test_view_state_dict_is_the_owners_state_dict():
    progress = in_fit_epoch(batches=2)
    assert progress.view.state_dict() == progress.state_dict()


# global_step ------------------------------------------------------------------------
def test_global_step_counts_optimizer_steps_of_all_optimizers_in_this_run():
    progress = in_fit_epoch()
    progress.train.optimizer_step(0)
    progress.train.optimizer_step(1)
    progress.train.optimizer_step(1)
    assert progress.view.global_step == 3


def test_global_step_leaves_out_skipped_steps():
    progress = in_fit_epoch()
    progress.train.optimizer_step(0)
    progress.train.optimizer_step_skipped(0)
    assert progress.view.global_step == 1


def test_global_step_starts_at_zero_in_each_new_run():
    progress = in_fit_epoch()
    progress.train.optimizer_step()
    progress.train.epoch_processed()
    progress.train.epoch_completed()
    progress.run_processed()
    progress.run_completed()
    progress.run_ready("fit")
    assert progress.view.global_step == 0
    assert progress.view.train.optimizer_steps.lifetime == 1


def test_global_step_does_not_reset_at_an_epoch():
    progress = in_fit_epoch()
    progress.train.optimizer_step()
    progress.train.epoch_processed()
    progress.train.epoch_completed()
    progress.train.epoch_ready()
    assert progress.view.global_step == 1


# epoch_index and batch_index ----------------------------------------------------------
def test_epoch_index_is_the_number_of_train_epochs_completed_in_this_run():
    progress = Progress()
    progress.run_ready("fit")
    progress.run_started()
    seen = [progress.view.epoch_index]
    train = progress.train
    for _ in range(2):
        for mark in (train.epoch_ready, train.epoch_started, train.epoch_processed, train.epoch_completed):
            mark()
            seen.append(progress.view.epoch_index)
    assert seen == [0, 0, 0, 0, 1, 1, 1, 1, 2]


def test_epoch_index_starts_at_zero_in_each_new_run():
    progress = Progress()
    whole_run(progress, "fit", epochs=3)
    progress.run_ready("fit")
    assert progress.view.epoch_index == 0


def test_batch_index_is_minus_one_before_the_first_batch_of_an_epoch():
    progress = in_fit_epoch()
    assert progress.view.batch_index == -1


def test_batch_index_is_the_index_of_the_last_batch_fetched_through_all_its_phases():
    progress = in_fit_epoch(batches=2)
    train = progress.train
    seen = []
    for mark in (train.batch_ready, train.batch_started, lambda: train.batch_processed(8), train.batch_completed):
        mark()
        seen.append(progress.view.batch_index)
    assert seen == [2, 2, 2, 2]


def test_batch_index_returns_to_minus_one_at_the_next_epoch_ready():
    progress = in_fit_epoch(batches=3)
    progress.train.epoch_processed()
    progress.train.epoch_completed()
    assert progress.view.batch_index == 2
    progress.train.epoch_ready()
    assert progress.view.batch_index == -1


def test_batch_index_steps_back_when_a_fetched_batch_is_cancelled():
    progress = in_fit_epoch(batches=1)
    progress.train.batch_ready()
    assert progress.view.batch_index == 1
    progress.train.cancel_batch()
    assert progress.view.batch_index == 0


def test_batch_index_of_the_progress_follows_train_batches_only():
    progress = in_fit_epoch(batches=2)
    whole_epoch(progress, "validate", batches=5)
    assert progress.view.batch_index == 1
    assert progress.view.validate.batch_index == 4


# is_mid_epoch -------------------------------------------------------------------------
def test_is_mid_epoch_is_false_until_the_first_batch_is_processed():
    progress = in_fit_epoch()
    assert not progress.view.is_mid_epoch
    progress.train.batch_ready()
    progress.train.batch_started()
    assert not progress.view.is_mid_epoch
    progress.train.batch_processed(8)
    assert progress.view.is_mid_epoch


def test_is_mid_epoch_stays_true_between_batches_and_during_validation():
    progress = in_fit_epoch(batches=1)
    assert progress.view.is_mid_epoch
    progress.validate.epoch_ready()
    progress.validate.epoch_started()
    whole_batch(progress, "validate")
    assert progress.view.is_mid_epoch
    assert progress.view.validate.is_mid_epoch


def test_is_mid_epoch_is_false_once_the_epoch_is_processed():
    progress = in_fit_epoch(batches=2)
    progress.train.epoch_processed()
    assert not progress.view.is_mid_epoch
    progress.train.epoch_completed()
    assert not progress.view.is_mid_epoch


def test_is_mid_epoch_is_false_outside_any_run():
    assert not Progress().view.is_mid_epoch


# is_mid_accumulation ------------------------------------------------------------------
def test_is_mid_accumulation_is_true_while_processed_train_batches_await_an_optimizer_step():
    progress = in_fit_epoch(batches=1)
    assert progress.view.is_mid_accumulation
    progress.train.optimizer_step()
    assert not progress.view.is_mid_accumulation


# totals -------------------------------------------------------------------------------
def test_total_batches_and_samples_add_up_the_processed_counts_of_all_stages_per_scope():
    progress = Progress()
    whole_run(progress, "fit", epochs=1, batches=2)  # 2 train batches of 8
    whole_run(progress, "test", epochs=1, batches=3)  # 3 test batches of 8
    progress.run_ready("predict")
    progress.run_started()
    progress.predict.epoch_ready()
    progress.predict.epoch_started()
    whole_batch(progress, "predict", samples=5)
    progress.predict.batch_ready()
    progress.predict.batch_started()  # fetched, not processed: not in the totals
    view = progress.view
    assert view.total_batches == ScopeCounts(epoch=1, run=1, lifetime=6)
    assert view.total_samples == ScopeCounts(epoch=5, run=5, lifetime=45)


def test_totals_of_a_fresh_progress_are_zero():
    view = Progress().view
    assert view.total_batches == ScopeCounts(0, 0, 0)
    assert view.total_samples == ScopeCounts(0, 0, 0)


# where --------------------------------------------------------------------------------
def test_where_is_none_before_any_mark():
    assert Progress().view.where is None


@pytest.mark.parametrize("phase", ["ready", "started", "processed", "completed"])
def test_where_after_a_run_mark_names_the_run_phase_with_no_stage(phase):
    progress = Progress()
    marks = {
        "ready": lambda: progress.run_ready("test"),
        "started": progress.run_started,
        "processed": progress.run_processed,
        "completed": progress.run_completed,
    }
    for name, mark in marks.items():
        mark()
        if name == phase:
            break
    assert progress.view.where == Where("", "run", phase)


@pytest.mark.parametrize("stage", ["train", "validate", "test", "predict"])
@pytest.mark.parametrize("phase", ["ready", "started", "processed", "completed"])
def test_where_after_an_epoch_mark_names_the_stage_epoch_and_phase(stage, phase):
    progress = Progress()
    progress.run_ready("fit" if stage == "train" else stage)
    progress.run_started()
    s = progress.stage(stage)
    for name in ("ready", "started", "processed", "completed"):
        getattr(s, f"epoch_{name}")()
        if name == phase:
            break
    assert progress.view.where == Where(stage, "epoch", phase)


@pytest.mark.parametrize("stage", ["train", "validate", "test", "predict"])
@pytest.mark.parametrize("phase", ["ready", "started", "processed", "completed"])
def test_where_after_a_batch_mark_names_the_stage_batch_and_phase(stage, phase):
    progress = Progress()
    progress.run_ready("fit" if stage == "train" else stage)
    progress.run_started()
    s = progress.stage(stage)
    s.epoch_ready()
    s.epoch_started()
    marks = {
        "ready": s.batch_ready,
        "started": s.batch_started,
        "processed": lambda: s.batch_processed(8),
        "completed": s.batch_completed,
    }
    for name, mark in marks.items():
        mark()
        if name == phase:
            break
    assert progress.view.where == Where(stage, "batch", phase)


def test_where_after_cancel_batch_names_the_batch_cancelled():
    progress = in_fit_epoch()
    progress.train.batch_ready()
    progress.train.batch_started()
    progress.train.cancel_batch()
    assert progress.view.where == Where("train", "batch", "cancelled")


# read-only ----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["train", "validate", "where", "global_step", "is_mid_epoch", "_progress", "extra"])
def test_setting_any_attribute_of_the_progress_view_raises_attribute_error_saying_it_is_read_only(name):
    view = in_fit_epoch(batches=1).view
    with pytest.raises(AttributeError, match=rf"cannot set or delete '{name}': ProgressView is read-only"):
        setattr(view, name, 0)


@pytest.mark.parametrize("name", ["name", "epochs", "batches", "samples", "dataloaders", "batch_index", "_stage", "x"])
@pytest.mark.parametrize("stage", ["validate", "test", "predict"])
def test_setting_any_attribute_of_a_stage_view_raises_attribute_error_saying_it_is_read_only(stage, name):
    view = Progress().view.stage(stage)
    with pytest.raises(AttributeError, match=rf"cannot set or delete '{name}': StageView is read-only"):
        setattr(view, name, 0)


@pytest.mark.parametrize("name", ["optimizer_steps", "accumulating_batches", "scheduler_steps", "_stage", "x"])
def test_setting_any_attribute_of_the_train_view_raises_attribute_error_saying_it_is_read_only(name):
    view = Progress().view.train
    with pytest.raises(AttributeError, match=rf"cannot set or delete '{name}': TrainStageView is read-only"):
        setattr(view, name, 0)


def test_read_only_error_says_progress_changes_only_through_the_owning_tracker():
    with pytest.raises(AttributeError, match="progress changes only through the owning tracker"):
        Progress().view.train = None  # type: ignore[misc]


def test_a_failed_attribute_set_leaves_the_view_working():
    progress = in_fit_epoch(batches=1)
    with pytest.raises(AttributeError):
        progress.view.train = progress.view.validate  # type: ignore[misc]
    assert progress.view.train.name == "train"


def test_deleting_an_attribute_of_the_progress_view_raises_attribute_error_and_keeps_it():
    view = Progress().view
    with pytest.raises(AttributeError, match="read-only"):
        del view.train  # type: ignore[misc]
    assert view.train.name == "train"


@pytest.mark.parametrize(
    ("read", "field"),
    [
        (lambda v: v.train.batches, "epoch"),
        (lambda v: v.train.batches.run, "completed"),
        (lambda v: v.train.epochs, "run"),
        (lambda v: v.train.samples, "lifetime"),
        (lambda v: v.train.dataloaders[0], "batches"),
        (lambda v: v.train.optimizer_steps, "run"),
        (lambda v: v.run, "kind"),
        (lambda v: v.where, "phase"),
    ],
    ids=["batches", "phase-counts", "epochs", "samples", "dataloader", "optimizer-steps", "run", "where"],
)
def test_returned_counts_are_immutable_named_tuples(read, field):
    progress = in_fit_epoch(batches=1)
    progress.train.optimizer_step()
    counts = read(progress.view)
    assert isinstance(counts, tuple) and hasattr(counts, "_fields")
    with pytest.raises(AttributeError):
        setattr(counts, field, 99)
    with pytest.raises(TypeError):
        counts[0] = 99  # type: ignore[index]


def test_dataloader_counts_come_as_a_tuple_that_cannot_grow():
    dataloaders = in_fit_epoch(batches=1).view.train.dataloaders
    with pytest.raises(AttributeError):
        dataloaders.append(None)  # type: ignore[attr-defined]


# get_progress -------------------------------------------------------------------------
class _Trainer:
    pass


def test_get_progress_returns_the_view_of_the_progress_attached_to_the_object():
    trainer, progress = _Trainer(), Progress()
    attach(trainer, progress)
    assert get_progress(trainer) is progress.view


def test_get_progress_returns_the_latest_progress_attached():
    trainer, first, second = _Trainer(), Progress(), Progress()
    attach(trainer, first)
    attach(trainer, second)
    assert get_progress(trainer) is second.view


def test_get_progress_of_an_object_without_a_tracker_raises_lookup_error_naming_its_type():
    with pytest.raises(LookupError, match="no progress tracker is attached to this _Trainer") as info:
        get_progress(_Trainer())
    assert "adapter" in str(info.value)


def test_get_progress_of_an_object_that_cannot_be_weakly_referenced_raises_lookup_error():
    with pytest.raises(LookupError, match="no progress tracker is attached to this int"):
        get_progress(42)


def test_attaching_a_progress_does_not_keep_its_owner_alive():
    trainer = _Trainer()
    attach(trainer, Progress())
    ref = weakref.ref(trainer)
    del trainer
    gc.collect()
    assert ref() is None
