"""AcceleratorProgress counts what a real Accelerator(cpu=True) does: batches, samples, real optimizer steps."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("accelerate")

import torch
from torch.utils.data import DataLoader

import tracker_core
from tracker_core import PhaseCounts, ScopeCounts
from tracker_core.integrations.accelerate import AcceleratorProgress

from helpers.accelerate_drive import Indexed, Setup, fresh_accelerator, run


@pytest.mark.parametrize(
    ("samples", "accumulation"),
    [(12, 2), (10, 2), (13, 2), (10, 3), (12, 1)],
    ids=["4-batches-k2", "4-batches-k2-uneven-last", "5-batches-k2", "4-batches-k3", "no-accumulation"],
)
def test_optimizer_steps_are_sync_windows_with_a_forced_step_at_the_end_of_each_epoch(samples, accumulation):
    result = run(Setup(samples=samples, accumulation=accumulation, epochs=3))
    per_epoch = math.ceil(math.ceil(samples / 3) / accumulation)
    view = result.progress.view
    assert view.train.optimizer_steps == ScopeCounts(per_epoch, 3 * per_epoch, 3 * per_epoch)
    assert view.global_step == 3 * per_epoch
    assert not view.is_mid_accumulation


def test_each_of_several_optimizers_counts_its_own_steps():
    result = run(Setup(samples=10, accumulation=3, optimizers=2, epochs=2))
    view = result.progress.view
    assert view.train.optimizer_steps_by_optimizer == (ScopeCounts(2, 4, 4), ScopeCounts(2, 4, 4))
    assert view.global_step == 8


def test_batches_samples_and_epochs_of_train_and_validation_are_counted():
    result = run(Setup(samples=10, epochs=2))
    view = tracker_core.get_progress(result.accelerator)
    assert view.train.batches.lifetime == PhaseCounts(8, 8, 8, 8)
    assert view.train.samples == ScopeCounts(10, 20, 20)
    assert view.train.epochs.lifetime == PhaseCounts(2, 2, 2, 2)
    assert view.validate.batches.run.completed == 6  # 7 samples in batches of 3, twice
    assert view.validate.samples.run == 14
    assert view.run.kind == "fit" and view.run.counts == PhaseCounts(1, 1, 1, 1)


def test_step_outside_a_sync_window_is_not_counted():
    accelerator = fresh_accelerator(Setup(accumulation=4))
    model = torch.nn.Linear(4, 1)
    model, optimizer, loader = accelerator.prepare(
        model, torch.optim.SGD(model.parameters(), lr=0.1), DataLoader(Indexed(12), batch_size=3)
    )
    progress = AcceleratorProgress(accelerator)
    windows = []
    with progress.fit(1) as fit:
        for _epoch in fit.epochs():
            for _ids, x, y in progress.train(loader):
                with accelerator.accumulate(model):
                    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                    optimizer.step()
                    optimizer.zero_grad()
                windows.append((accelerator.sync_gradients, progress.view.global_step))
    assert windows == [(False, 0), (False, 0), (False, 0), (True, 1)]


def test_evaluation_outside_epochs_is_a_run_of_its_own_kind():
    accelerator = fresh_accelerator(Setup())
    loader = accelerator.prepare(DataLoader(Indexed(7), batch_size=3))
    progress = AcceleratorProgress(accelerator)
    assert [ids.tolist() for ids, _x, _y in progress.test(loader)] == [[0, 1, 2], [3, 4, 5], [6]]
    view = progress.view
    assert view.run.kind == "test" and view.run.counts == PhaseCounts(1, 1, 1, 1)
    assert view.test.samples.lifetime == 7
    list(progress.predict(loader))
    assert view.run.kind == "predict" and view.predict.batches.lifetime.completed == 3


def test_breaking_out_of_a_train_pass_before_training_undoes_the_batch_in_hand():
    accelerator = fresh_accelerator(Setup())
    loader = accelerator.prepare(DataLoader(Indexed(10), batch_size=3))
    progress = AcceleratorProgress(accelerator)
    with progress.fit(1) as fit:
        for _epoch in fit.epochs():
            for index, _batch in enumerate(progress.train(loader)):
                if index == 1:
                    break  # Accelerate never saw batch 1 (no accumulate, no optimizer step)
    assert progress.view.train.batches.lifetime == PhaseCounts(1, 1, 1, 1)
    assert progress.view.train.epochs.lifetime.completed == 1


def _train_with_an_overflow_at_batch_1(save_to: Path | None = None) -> tuple[AcceleratorProgress, Any]:
    """One epoch of 4 batches whose second loss overflows (the GradScaler skips that step). With ``save_to``:
    ``save_state`` there from the loop body right after that batch, then the loop is left; also returns the train
    view at that save."""
    accelerator = fresh_accelerator(Setup(accumulation=1))
    accelerator.scaler = torch.amp.GradScaler("cpu")  # Accelerate makes none on CPU; AMP skips need one
    model = torch.nn.Linear(4, 1)
    model, optimizer, loader = accelerator.prepare(
        model, torch.optim.SGD(model.parameters(), lr=0.1), DataLoader(Indexed(12), batch_size=3)
    )
    progress = AcceleratorProgress(accelerator)
    at_save = None
    with progress.fit(1) as fit:
        for _epoch in fit.epochs():
            for index, (_ids, x, y) in enumerate(progress.train(loader)):
                with accelerator.accumulate(model):
                    overflow = float("inf") if index == 1 else 1.0
                    accelerator.backward(torch.nn.functional.mse_loss(model(x), y) * overflow)
                    optimizer.step()
                    optimizer.zero_grad()
                if save_to is not None and index == 1:
                    accelerator.save_state(str(save_to))
                    at_save = progress.view.train
                    break
    return progress, at_save


def test_a_step_skipped_by_the_grad_scaler_is_counted_apart():
    progress, _ = _train_with_an_overflow_at_batch_1()
    assert progress.view.train.optimizer_steps.lifetime == 3
    assert progress.view.train.optimizer_steps_skipped.lifetime == 1


def test_a_step_skipped_in_a_batch_saved_from_the_loop_body_is_in_the_saved_progress(tmp_path):
    _, saved = _train_with_an_overflow_at_batch_1(save_to=tmp_path / "state")
    assert (saved.optimizer_steps.lifetime, saved.optimizer_steps_skipped.lifetime) == (1, 1)


def test_breaking_out_of_an_evaluation_ends_its_epoch_and_run():
    accelerator = fresh_accelerator(Setup())
    loader = accelerator.prepare(DataLoader(Indexed(7), batch_size=3))
    progress = AcceleratorProgress(accelerator)
    for _batch in progress.evaluate(loader):
        break
    view = progress.view
    assert view.validate.batches.lifetime == PhaseCounts(1, 1, 1, 1)
    assert view.validate.epochs.lifetime == PhaseCounts(1, 1, 1, 1)
    assert view.run.kind == "validate" and view.run.counts == PhaseCounts(1, 1, 1, 1)


def test_the_optimizer_prepared_after_free_memory_is_counted():
    accelerator = fresh_accelerator(Setup(accumulation=1))
    progress = AcceleratorProgress(accelerator)
    batches = [(torch.randn(3, 4), torch.randn(3, 1)) for _ in range(5)]
    for _fit in range(2):  # free_memory() empties Accelerate's lists: the second prepare() puts a new optimizer first
        accelerator.free_memory()
        model = torch.nn.Linear(4, 1)
        model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
        with progress.fit(1) as fit:
            for _epoch in fit.epochs():
                for x, y in fit.train(batches):
                    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                    optimizer.step()
                    optimizer.zero_grad()
        assert progress.view.global_step == 5
    assert progress.view.train.optimizer_steps.lifetime == 10
