"""Saves a loop reaches by nesting or leaving its passes (docs/accelerate.md, "Limits" and "A passenger"): inside a
validation nested in the train pass's body (its resume goes on with the next train batch: warned, and a later
validation's RNGs are left alone), and after the ``with progress.fit(n)`` block was left in the middle of an epoch (saved
as inside the block: the resume continues the cut epoch)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Literal

import pytest

pytest.importorskip("accelerate")
pytest.importorskip("torchdata")

import torch
from torch.utils.data import DataLoader

from tracker_core import InexactResumeWarning
from tracker_core.integrations.accelerate import AcceleratorProgress

from helpers.accelerate_drive import Indexed, Setup, fresh_accelerator
from helpers.accelerate_save_places import leaving_the_fit, resumed_exactly, validating

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")

NOT_RERUN = "so that evaluation is not rerun"


def test_a_save_state_inside_a_validation_nested_in_the_train_pass_warns_that_it_is_not_rerun(tmp_path: Path) -> None:
    with pytest.warns(
        InexactResumeWarning, match=f"nested in the loop body of train dataloader 0's pass: .*{NOT_RERUN}"
    ):
        validating("nested", save_dir=str(tmp_path))


def test_a_load_state_of_a_save_inside_a_nested_validation_warns_that_it_is_not_rerun(tmp_path: Path) -> None:
    with pytest.warns(InexactResumeWarning):
        validating("nested", save_dir=str(tmp_path))
    with pytest.warns(InexactResumeWarning, match=f"saved inside a validate pass nested in .*{NOT_RERUN}"):
        validating("nested", load_dir=str(tmp_path))


def test_no_validation_after_resuming_a_save_inside_a_nested_validation_moves_the_global_rng(tmp_path: Path) -> None:
    with pytest.warns(InexactResumeWarning):
        validating("nested", save_dir=str(tmp_path))
    with pytest.warns(InexactResumeWarning):
        resumed = validating("nested", load_dir=str(tmp_path))
    assert resumed.evaluations_moving_rng == []


def test_a_validation_after_resumed_train_batches_leaves_the_rngs_of_the_one_saved_mid_way_unused(
    tmp_path: Path,
) -> None:
    # Saved in a validation after the loop broke out of the pass: the resumed epoch trains the pass's remaining
    # batches first, so the next validation is another one.
    with pytest.warns(InexactResumeWarning):
        validating("after-break", save_dir=str(tmp_path))
    with pytest.warns(InexactResumeWarning):
        resumed = validating("after-break", load_dir=str(tmp_path))
    assert resumed.evaluations_moving_rng == []


@pytest.mark.parametrize("how", ["interrupt", "break"])
@pytest.mark.parametrize("stop_after", [1, 5], ids=["epoch0", "epoch1"])
def test_a_save_state_after_the_fit_block_was_left_mid_epoch_resumes_exactly(
    how: Literal["interrupt", "break"], stop_after: int, tmp_path: Path
) -> None:
    reference = leaving_the_fit(how)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InexactResumeWarning)  # the pass was left (the resumed one yields its rest)
        stopped = leaving_the_fit(how, stop_after=stop_after, save_dir=str(tmp_path))
        resumed = leaving_the_fit(how, load_dir=str(tmp_path))
    assert resumed_exactly(reference, stopped, resumed)


def test_a_save_state_after_the_fit_block_was_left_mid_epoch_of_a_plain_dataloader_warns_at_save_and_load(
    tmp_path: Path,
) -> None:
    with pytest.warns(InexactResumeWarning, match="saving DataLoader over Indexed"):
        leaving_the_fit("interrupt", stateful=False, stop_after=5, save_dir=str(tmp_path))
    with pytest.warns(InexactResumeWarning, match="resuming DataLoader over Indexed"):
        leaving_the_fit("interrupt", stateful=False, load_dir=str(tmp_path))


@pytest.mark.parametrize(("at", "warns"), [(3, True), (2, False)], ids=["window-end", "inside-window"])
def test_a_save_state_before_the_optimizer_step_of_a_windows_last_batch_warns_that_the_step_is_lost(
    at: int, warns: bool, tmp_path: Path
) -> None:
    accelerator = fresh_accelerator(Setup(accumulation=3, stateful=True))  # batch 3 ends the first window
    model = torch.nn.Linear(4, 1)
    loader = DataLoader(Indexed(18), batch_size=3)
    model, optimizer, loader = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), loader)
    progress = AcceleratorProgress(accelerator)
    with warnings.catch_warnings(record=True) as caught, progress.fit(1) as fit:
        warnings.simplefilter("always")
        for _epoch in fit.epochs():
            for batch, (_ids, x, y) in enumerate(fit.train(loader), start=1):
                with accelerator.accumulate(model):
                    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                    if batch == at:
                        accelerator.save_state(str(tmp_path / "saved"))
                    optimizer.step()
                    optimizer.zero_grad()
    lost = [w for w in caught if "before its optimizer step" in str(w.message)]
    assert len(lost) == int(warns)


def test_a_stateful_loader_prepared_after_load_state_warns_that_its_epoch_is_read_from_its_start_and_restarts_it(
    tmp_path: Path,
) -> None:
    def program(load: bool) -> AcceleratorProgress:
        accelerator = fresh_accelerator(Setup(accumulation=1, stateful=True))
        model = torch.nn.Linear(4, 1)
        model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
        progress = AcceleratorProgress(accelerator)
        accelerator.register_for_checkpointing(progress)
        if load:
            accelerator.load_state(str(tmp_path / "saved"))
        loader = accelerator.prepare(DataLoader(Indexed(12), batch_size=3, shuffle=True))  # after the load
        with progress.fit(1) as fit:
            for _epoch in fit.epochs():
                for index, (_ids, x, y) in fit.train(loader, with_index=True):
                    indices.append(index)
                    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                    optimizer.step()
                    optimizer.zero_grad()
                    if index == 1 and not load:
                        accelerator.save_state(str(tmp_path / "saved"))
        return progress

    indices: list[int] = []
    program(load=False)
    indices.clear()
    with pytest.warns(InexactResumeWarning, match="train dataloader 0 has no state restored: it was prepared after"):
        resumed = program(load=True)
    assert indices == [0, 1, 2, 3]  # its epoch restarts, read whole, and so do its counts
    assert resumed.view.train.batches.lifetime.completed == 6  # the two trained before the checkpoint stay
    assert any("prepared after accelerator.load_state" in anomaly for anomaly in resumed.view.anomalies)
