"""Accelerate's checkpointing example skips the trained batches itself; with AcceleratorProgress they would be skipped twice.

The program is Accelerate's ``examples/by_feature/checkpointing.py`` with the loops of AcceleratorProgress: it saves
``step_{N}`` after its N-th batch and, resuming, computes ``starting_epoch`` and ``resume_step`` from the name and
iterates ``accelerator.skip_first_batches(loader, resume_step)`` in epoch ``starting_epoch``. With
``use_stateful_dataloader``, in the epoch ``load_state`` resumes, ``progress.train()`` already yields only the batches
not yet trained: such a loader there is refused with ``ValueError`` before any batch is fetched. A plain loader is not
positioned: the resumed epoch restarts from its first batch, and the example's skip there is a loader like any other. Outside that epoch (the example's ``skip_first_batches(loader,
0)`` after a checkpoint at an epoch's last batch) it is a loader like any other, and the resume is exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("accelerate")

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import DataLoaderConfiguration
from torch.utils.data import DataLoader, Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import InexactResumeWarning, comparable_state
from tracker_core.integrations.accelerate import AcceleratorProgress

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")

BATCHES = 6  # an epoch: 24 samples in batches of 4
EPOCHS = 3
LOADERS = {"plain": False, "stateful": True}  # use_stateful_dataloader


class Indexed(Dataset[tuple[int, torch.Tensor]]):
    def __len__(self) -> int:
        return 4 * BATCHES

    def __getitem__(self, index: int) -> tuple[int, torch.Tensor]:
        return index, torch.linspace(-1, 1, 2) * index / 24


@dataclass
class Run:
    ids: list[list[int]] = field(default_factory=list)
    weights: list[torch.Tensor] = field(default_factory=list)
    progress: dict[str, Any] = field(default_factory=dict)


def _example(
    stateful: bool,
    *,
    save_after: int | None = None,
    folder: Path | None = None,
    resume_from: Path | None = None,
    skip_in: str = "starting_epoch",
    run: Run | None = None,
    torchdata: bool = False,
) -> Run:
    """Accelerate's checkpointing example: save ``folder/step_{save_after}`` and stop, or resume from ``resume_from``
    skipping ``resume_step`` batches in epoch ``starting_epoch`` (``skip_in="first"``: in the first epoch the loop
    yields; ``"never"``: no skip_first_batches call)."""
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=stateful))
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    kind = StatefulDataLoader if torchdata else DataLoader  # torchdata's sampler has a state of its own
    model, optimizer, train_dataloader = accelerator.prepare(
        model, optimizer, kind(Indexed(), batch_size=4, shuffle=True)
    )
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    progress.track_train_loader(train_dataloader)
    run = Run() if run is None else run
    overall_step, starting_epoch, resume_step = 0, 0, None
    if resume_from is not None:
        torch.manual_seed(7)  # the resumed process is seeded otherwise: the checkpoint's RNGs must be restored
        accelerator.load_state(str(resume_from))
        resume_step = int(resume_from.name.replace("step_", ""))
        starting_epoch = resume_step // len(train_dataloader)
        resume_step -= starting_epoch * len(train_dataloader)
        overall_step = starting_epoch * len(train_dataloader)
    first = True
    with progress.fit(EPOCHS) as fit:
        for epoch in fit.epochs():
            skip = {"starting_epoch": epoch == starting_epoch, "first": first, "never": False}[skip_in]
            if resume_step is not None and skip:
                active_dataloader = accelerator.skip_first_batches(train_dataloader, resume_step)
                overall_step += resume_step
            else:
                active_dataloader = train_dataloader
            first = False
            for ids, x in progress.train(active_dataloader):
                run.ids.append(ids.tolist())
                accelerator.backward(model(torch.nn.functional.dropout(x, 0.5)).square().mean())
                optimizer.step()
                optimizer.zero_grad()
                overall_step += 1
                if overall_step == save_after and folder is not None:
                    accelerator.save_state(str(folder / f"step_{overall_step}"))
                    return run
    run.weights = [p.detach().clone() for p in model.parameters()]
    run.progress = comparable_state(progress.view.state_dict())
    return run


def _saved(stateful: bool, after: int, tmp_path: Path) -> tuple[Run, Path]:
    stopped = _example(stateful, save_after=after, folder=tmp_path)
    return stopped, tmp_path / f"step_{after}"


def _assert_equals_the_uninterrupted_run(stateful: bool, stopped: Run, resumed: Run, **how: bool) -> None:
    uninterrupted = _example(stateful, **how)
    assert stopped.ids + resumed.ids == uninterrupted.ids
    assert all(torch.equal(a, b) for a, b in zip(resumed.weights, uninterrupted.weights, strict=True))
    assert resumed.progress == uninterrupted.progress


def _assert_refused_before_any_batch(stateful: bool, checkpoint: Path, skip_in: str) -> None:
    resumed = Run()
    with pytest.raises(ValueError, match=r"made by accelerator\.skip_first_batches") as refused:
        _example(stateful, resume_from=checkpoint, skip_in=skip_in, run=resumed)
    assert "Remove the skip_first_batches call and pass the prepared loader" in str(refused.value)
    assert resumed.ids == []


def test_skip_first_batches_in_the_epoch_resumed_mid_way_by_a_stateful_loader_is_refused_before_any_batch_is_fetched(
    tmp_path: Path,
) -> None:
    _, checkpoint = _saved(True, BATCHES + 2, tmp_path)  # step_8: the example skips 2 in epoch 1
    _assert_refused_before_any_batch(True, checkpoint, skip_in="starting_epoch")


# A plain loader is not positioned: the resumed epoch restarts from its first batch (Accelerate's loop reads the
# loader whole), and the example's skip_first_batches is Accelerate's own way to skip the trained batches there.


def test_the_examples_skip_of_a_plain_loader_in_the_epoch_resumed_mid_way_is_a_loader_like_any_other(
    tmp_path: Path,
) -> None:
    stopped, checkpoint = _saved(False, BATCHES + 2, tmp_path)
    with pytest.warns(InexactResumeWarning, match="^resuming .* after 2 batches of an epoch"):
        resumed = _example(False, resume_from=checkpoint, skip_in="starting_epoch")
    assert [len(ids) for ids in stopped.ids + resumed.ids] == [4] * EPOCHS * BATCHES
    assert resumed.progress["stages"]["train"]["batches"]["lifetime"]["completed"] == EPOCHS * BATCHES


@pytest.mark.parametrize("loader", LOADERS)
def test_skip_first_batches_in_the_epoch_resumed_after_its_last_batch_is_refused_before_any_batch_is_fetched(
    loader: str, tmp_path: Path
) -> None:
    _, checkpoint = _saved(LOADERS[loader], BATCHES, tmp_path)  # step_6: the loop yields epoch 0 again, passed
    _assert_refused_before_any_batch(LOADERS[loader], checkpoint, skip_in="first")  # skip_first_batches(loader, 0)


def test_the_refused_program_without_the_call_over_a_statefuldataloader_resumes_mid_epoch_exactly(
    tmp_path: Path,
) -> None:
    stopped = _example(True, save_after=BATCHES + 2, folder=tmp_path, torchdata=True)
    resumed = _example(True, resume_from=tmp_path / f"step_{BATCHES + 2}", skip_in="never", torchdata=True)
    _assert_equals_the_uninterrupted_run(True, stopped, resumed, torchdata=True)


def test_the_program_without_the_call_over_a_plain_loader_reads_the_resumed_epoch_whole(tmp_path: Path) -> None:
    stopped, checkpoint = _saved(False, BATCHES + 2, tmp_path)
    with pytest.warns(InexactResumeWarning, match="^resuming .* after 2 batches of an epoch"):
        resumed = _example(False, resume_from=checkpoint, skip_in="never")
    assert len(stopped.ids) + len(resumed.ids) == EPOCHS * BATCHES + 2
    train = resumed.progress["stages"]["train"]
    assert train["batches"]["lifetime"]["completed"] == EPOCHS * BATCHES + 2  # the 2 before the checkpoint stay
    assert train["epochs"]["lifetime"]["completed"] == EPOCHS


def test_the_refused_program_without_the_call_over_a_stateful_loader_resumes_mid_epoch_and_warns_of_its_order(
    tmp_path: Path,
) -> None:
    # A trade: torchdata draws the order of torch's RandomSampler (no state of its own) again at the first batch.
    stopped, checkpoint = _saved(True, BATCHES + 2, tmp_path)
    with pytest.warns(InexactResumeWarning, match="its RandomSampler has no state of its own"):
        resumed = _example(True, resume_from=checkpoint, skip_in="never")
    assert len(stopped.ids) + len(resumed.ids) == EPOCHS * BATCHES


@pytest.mark.parametrize("loader", LOADERS)
def test_the_examples_skip_of_no_batch_in_the_epoch_after_a_checkpoint_at_an_epochs_end_resumes_exactly(
    loader: str, tmp_path: Path
) -> None:
    stopped, checkpoint = _saved(LOADERS[loader], BATCHES, tmp_path)  # step_6: starting_epoch 1, resume_step 0
    resumed = _example(LOADERS[loader], resume_from=checkpoint, skip_in="starting_epoch")
    _assert_equals_the_uninterrupted_run(LOADERS[loader], stopped, resumed)


def test_a_loader_made_by_skip_first_batches_in_a_run_that_resumed_nothing_skips_as_asked() -> None:
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    accelerator = Accelerator(cpu=True)
    loader = accelerator.prepare(DataLoader(Indexed(), batch_size=4))
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    with progress.fit(1) as fit:
        for _ in fit.epochs():
            ids = [batch_ids.tolist() for batch_ids, _ in progress.train(accelerator.skip_first_batches(loader, 2))]
    assert ids == [list(range(i, i + 4)) for i in range(8, 24, 4)]
    assert progress.view.train.batches.lifetime.completed == 4
