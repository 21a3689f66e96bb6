"""Scope specifications: the epoch, run and lifetime scopes of every count."""

from __future__ import annotations

import pytest

from tracker_core import PhaseCounts, Progress, ProgressStateError, ScopeCounts

from helpers.core_drive import driven, fit_script, in_fit_epoch, whole_batch, whole_epoch, whole_run


def _train_epoch(progress: Progress, batches: int = 2, samples: int = 8, step: bool = True) -> None:
    train = progress.train
    train.epoch_ready()
    train.epoch_started()
    for _ in range(batches):
        train.batch_ready()
        train.batch_started()
        if step:
            train.optimizer_step()
        train.batch_processed(samples)
        train.batch_completed()
    train.scheduler_step()
    train.epoch_processed()
    train.epoch_completed()


def _fit(progress: Progress, epochs: int, batches: int = 2) -> None:
    progress.run_ready("fit")
    progress.run_started()
    for _ in range(epochs):
        _train_epoch(progress, batches)
    progress.run_processed()
    progress.run_completed()


# epoch scope ------------------------------------------------------------------------
def test_epoch_scope_of_batches_resets_at_each_epoch_ready():
    progress = Progress()
    progress.run_ready("fit")
    progress.run_started()
    _train_epoch(progress, batches=3)
    assert progress.view.train.batches.epoch == PhaseCounts(3, 3, 3, 3)
    progress.train.epoch_ready()
    assert progress.view.train.batches.epoch == PhaseCounts(0, 0, 0, 0)
    assert progress.view.train.batches.run == PhaseCounts(3, 3, 3, 3)


def test_epoch_scope_of_samples_dataloaders_and_steps_resets_at_each_epoch_ready():
    progress = Progress()
    progress.run_ready("fit")
    progress.run_started()
    _train_epoch(progress, batches=2, samples=8)
    progress.train.epoch_ready()
    view = progress.view.train
    assert view.samples == ScopeCounts(0, 16, 16)
    assert view.dataloaders[0] == (ScopeCounts(0, 2, 2), ScopeCounts(0, 16, 16))
    assert view.optimizer_steps == ScopeCounts(0, 2, 2)
    assert view.scheduler_steps == ScopeCounts(0, 1, 1)


def test_epoch_scope_keeps_its_counts_after_the_epoch_completes_until_the_next_epoch_ready():
    progress = Progress()
    progress.run_ready("fit")
    progress.run_started()
    _train_epoch(progress, batches=2)
    assert progress.view.train.batches.epoch.completed == 2
    assert progress.view.train.samples.epoch == 16


def test_a_validation_epoch_does_not_reset_the_train_epoch_scope():
    progress = in_fit_epoch(batches=2)
    whole_epoch(progress, "validate", batches=3)
    whole_batch(progress, "train")
    assert progress.view.train.batches.epoch.completed == 3
    assert progress.view.validate.batches.epoch.completed == 3


def test_each_validation_epoch_has_its_own_epoch_scope():
    progress = in_fit_epoch(batches=1)
    whole_epoch(progress, "validate", batches=3, samples=4)
    whole_epoch(progress, "validate", batches=2, samples=4)
    view = progress.view.validate
    assert view.batches.epoch.completed == 2 and view.batches.run.completed == 5
    assert view.samples == ScopeCounts(8, 20, 20)
    assert view.epochs.run == PhaseCounts(2, 2, 2, 2)


# run scope --------------------------------------------------------------------------
def test_run_scope_resets_at_each_run_ready():
    progress = Progress()
    _fit(progress, epochs=2)
    progress.run_ready("fit")
    view = progress.view.train
    assert view.epochs.run == PhaseCounts(0, 0, 0, 0)
    assert view.batches.run == PhaseCounts(0, 0, 0, 0)
    assert view.samples.run == 0 and view.optimizer_steps.run == 0 and view.scheduler_steps.run == 0
    assert view.dataloaders[0].batches.run == 0


def test_run_scope_keeps_its_counts_after_the_run_completes_until_the_next_run_ready():
    progress = Progress()
    _fit(progress, epochs=2)
    assert progress.view.train.epochs.run == PhaseCounts(2, 2, 2, 2)
    assert progress.view.global_step == 4


def test_run_ready_also_resets_the_epoch_scope():
    progress = Progress()
    _fit(progress, epochs=1, batches=3)
    progress.run_ready("fit")
    assert progress.view.train.batches.epoch == PhaseCounts(0, 0, 0, 0)
    assert progress.view.train.samples.epoch == 0


def test_run_ready_resets_the_run_scope_of_every_stage():
    progress = Progress()
    whole_run(progress, "test", epochs=1, batches=2)
    progress.run_ready("predict")
    assert progress.view.test.batches.run == PhaseCounts(0, 0, 0, 0)
    assert progress.view.test.epochs.run == PhaseCounts(0, 0, 0, 0)
    assert progress.view.test.batches.lifetime.completed == 2


def test_a_new_run_after_a_finished_run_starts_its_run_scope_at_zero():
    progress = Progress()
    _fit(progress, epochs=3)
    progress.run_ready("fit")
    progress.run_started()
    _train_epoch(progress, batches=2)
    view = progress.view
    assert view.train.epochs.run.completed == 1
    assert view.train.epochs.lifetime.completed == 4
    assert view.global_step == 2
    assert view.epoch_index == 1
    assert view.run.counts == PhaseCounts(2, 2, 1, 1)


def test_a_validate_run_after_fit_counts_validation_in_its_own_run_scope():
    progress = Progress()
    progress.run_ready("fit")
    progress.run_started()
    _train_epoch(progress)
    whole_epoch(progress, "validate", batches=2)
    progress.run_processed()
    progress.run_completed()
    whole_run(progress, "validate", epochs=1, batches=3)
    assert progress.view.validate.batches.run.completed == 3
    assert progress.view.validate.batches.lifetime.completed == 5
    assert progress.view.run.kind == "validate"


# lifetime scope ---------------------------------------------------------------------
def test_lifetime_scope_keeps_counting_across_epochs_and_runs():
    progress = Progress()
    _fit(progress, epochs=2, batches=2)
    _fit(progress, epochs=1, batches=3)
    whole_run(progress, "test", epochs=1, batches=4)
    view = progress.view
    assert view.train.epochs.lifetime == PhaseCounts(3, 3, 3, 3)
    assert view.train.batches.lifetime.completed == 7
    assert view.train.optimizer_steps.lifetime == 7
    assert view.test.batches.lifetime.completed == 4
    assert view.run.counts == PhaseCounts(3, 3, 3, 3)


# load_lifetime ----------------------------------------------------------------------
def _trained_for(epochs: int) -> dict:
    progress = Progress()
    _fit(progress, epochs=epochs, batches=1)
    return progress.state_dict()


def test_load_lifetime_of_a_model_trained_for_1000_epochs_then_10_more_gives_10_in_run_and_1010_in_lifetime():
    progress = Progress()
    progress.load_lifetime(_trained_for(1000))
    _fit(progress, epochs=10, batches=1)
    view = progress.view
    assert view.train.epochs.run == PhaseCounts(10, 10, 10, 10)
    assert view.train.epochs.lifetime == PhaseCounts(1010, 1010, 1010, 1010)
    assert view.train.batches.run.completed == 10 and view.train.batches.lifetime.completed == 1010
    assert view.global_step == 10 and view.train.optimizer_steps.lifetime == 1010
    assert view.epoch_index == 10


def test_load_lifetime_keeps_lifetime_counts_and_empties_the_run_and_epoch_scopes():
    trained = Progress()
    _fit(trained, epochs=2, batches=3)
    progress = Progress()
    progress.load_lifetime(trained.state_dict())
    view = progress.view.train
    assert view.batches == (PhaseCounts(0, 0, 0, 0), PhaseCounts(0, 0, 0, 0), PhaseCounts(6, 6, 6, 6))
    assert view.epochs == (PhaseCounts(0, 0, 0, 0), PhaseCounts(2, 2, 2, 2))
    assert view.samples == ScopeCounts(0, 0, 48)
    assert view.optimizer_steps == ScopeCounts(0, 0, 6)
    assert view.scheduler_steps == ScopeCounts(0, 0, 2)
    assert view.dataloaders[0].batches == ScopeCounts(0, 0, 6)


def test_load_lifetime_of_a_mid_epoch_checkpoint_begins_a_new_run_and_a_new_epoch():
    script = fit_script(epochs=2, batches=4)
    cut = script.frames[1].steps["started"] + 6  # inside the first train epoch
    state = driven(script, cut).state_dict()
    assert state["stages"]["train"]["epochs"]["lifetime"] == {"ready": 1, "started": 1, "processed": 0, "completed": 0}
    progress = Progress()
    progress.load_lifetime(state)
    assert not progress.view.run.counts.in_flight
    assert not progress.view.train.epochs.lifetime.in_flight
    progress.run_ready("fit")
    progress.run_started()
    progress.train.epoch_ready()
    assert progress.view.run.counts == PhaseCounts(2, 2, 1, 1)
    assert progress.view.train.epochs.run == PhaseCounts(1, 0, 0, 0)
    assert progress.view.train.batches.epoch == PhaseCounts(0, 0, 0, 0)


def test_load_lifetime_of_a_bad_state_raises_progress_state_error_and_changes_nothing():
    progress = in_fit_epoch(batches=2)
    before = progress.state_dict()
    state = _trained_for(3)
    state["stages"]["train"]["samples"]["lifetime"] = -1
    with pytest.raises(ProgressStateError) as info:
        progress.load_lifetime(state)
    assert info.value.key == "stages.train.samples.lifetime"
    assert progress.state_dict() == before


def test_state_dict_right_after_load_lifetime_of_a_mid_epoch_checkpoint_loads_again():
    progress = in_fit_epoch(batches=0)  # where: train epoch started
    fresh = Progress()
    fresh.load_lifetime(progress.state_dict())
    Progress().load_state_dict(fresh.state_dict())
