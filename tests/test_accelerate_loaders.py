"""Several train loaders alternated on the loop's own schedule, and the in-epoch batch index given with each
batch (issue 13 items 14 and 16), with a real Accelerator(cpu=True)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

pytest.importorskip("accelerate")

import torch
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import InexactResumeWarning, ScopeCounts
from tracker_core.integrations.accelerate import AcceleratorProgress

from helpers.accelerate_drive import Indexed, Setup, fresh_accelerator
from helpers.accelerate_oracle import Config, Stop, run

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")


def test_each_train_loader_has_its_own_counts_in_the_view() -> None:
    trace = run(Config(train_sizes=(10, 7), epochs=2))
    loaders = trace.state["stages"]["train"]["dataloaders"]
    assert [loader["batches"]["lifetime"] for loader in loaders] == [8, 6]  # 4 and 3 batches an epoch
    assert trace.disagreements == []


def test_the_checkpoint_holds_the_progress_and_position_of_each_train_loader(tmp_path: Path) -> None:
    run(Config(train_sizes=(10, 7)), stop=Stop(0, 3), directory=str(tmp_path))
    saved = torch.load(tmp_path / "progress_tracker_0.pt", weights_only=True)
    dataloaders = saved["tracker"]["progress"]["stages"]["train"]["dataloaders"]
    assert [loader["batches"]["lifetime"] for loader in dataloaders] == [2, 2]
    assert len(saved["tracker"]["train_loaders"]) == 2


def test_after_a_resume_each_loader_continues_with_its_own_samples(tmp_path: Path) -> None:
    config = Config(train_sizes=(3, 10), accumulation=3, loader="stateful-own")
    reference = run(config)
    stopped = run(config, stop=Stop(0, 2), directory=str(tmp_path))
    with pytest.warns(InexactResumeWarning, match="train dataloaders 0, 1 have passes open"):
        resumed = run(config, resume=True, directory=str(tmp_path), seed_value=5)
    for loader in (0, 1):
        ids = [batch[2] for batch in stopped.train + resumed.train if batch[1] == loader]
        assert ids == [batch[2] for batch in reference.train if batch[1] == loader]
    assert resumed.disagreements == []


def test_a_resume_with_one_loader_is_exact_and_does_not_warn(tmp_path: Path) -> None:
    config = Config(train_sizes=(10,), accumulation=3, loader="stateful-own")
    reference = run(config)
    stopped = run(config, stop=Stop(1, 1), directory=str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error", InexactResumeWarning)
        resumed = run(config, resume=True, directory=str(tmp_path), seed_value=5)
    assert stopped.train + resumed.train == reference.train
    assert all(torch.equal(a, b) for a, b in zip(resumed.weights, reference.weights, strict=True))
    assert resumed.state == reference.state


def test_a_resume_with_several_open_passes_names_the_loaders(tmp_path: Path) -> None:
    config = Config(train_sizes=(10, 7), accumulation=2, loader="stateful-own")
    run(config, stop=Stop(0, 1), directory=str(tmp_path))
    with pytest.warns(InexactResumeWarning, match="train dataloaders 0, 1 have passes open or still to begin"):
        resumed = run(config, resume=True, directory=str(tmp_path), seed_value=5)
    assert resumed.disagreements == []


def test_a_save_with_several_open_passes_names_the_loaders_as_the_resume_will(tmp_path: Path) -> None:
    with pytest.warns(InexactResumeWarning, match="train dataloaders 0, 1 have passes open or still to begin"):
        run(
            Config(train_sizes=(10, 7), accumulation=2, loader="stateful-own"), stop=Stop(0, 1), directory=str(tmp_path)
        )


def _indices(accelerator, progress, loader, model, optimizer, save_at: tuple[int, int] | None, path: Path) -> list[int]:
    seen = []
    with progress.fit(2) as fit:
        for epoch in fit.epochs():
            for index, (_ids, x, y) in progress.train(loader, with_index=True):
                seen.append(index)
                with accelerator.accumulate(model):
                    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                    optimizer.step()
                    optimizer.zero_grad()
                if (epoch, index) == save_at:
                    accelerator.save_state(str(path))
                    return seen
    return seen


def _program(save_at: tuple[int, int] | None, path: Path, load: bool, stateful: bool = True) -> list[int]:
    accelerator = fresh_accelerator(Setup(stateful=stateful))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    kind = StatefulDataLoader if stateful else DataLoader
    model, optimizer, loader = accelerator.prepare(
        model, torch.optim.SGD(model.parameters(), lr=0.1), kind(Indexed(13), batch_size=3, shuffle=True)
    )
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    progress.track_train_loader(loader)
    if load:
        accelerator.load_state(str(path))
    return _indices(accelerator, progress, loader, model, optimizer, save_at, path)


def test_the_batch_index_given_with_a_batch_continues_after_a_resume(tmp_path: Path) -> None:
    assert _program((0, 1), tmp_path, load=False) == [0, 1]
    assert _program(None, tmp_path, load=True) == [2, 3, 4, 0, 1, 2, 3, 4]


@pytest.mark.filterwarnings("ignore::tracker_core.InexactResumeWarning")
def test_the_batch_index_of_a_plain_loader_starts_again_in_the_restarted_epoch(tmp_path: Path) -> None:
    assert _program((0, 1), tmp_path, load=False, stateful=False) == [0, 1]
    assert _program(None, tmp_path, load=True, stateful=False) == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]


def test_the_batch_index_counts_the_batches_of_its_own_loader() -> None:
    accelerator = fresh_accelerator(Setup())
    first, second = accelerator.prepare(DataLoader(Indexed(6), batch_size=3), DataLoader(Indexed(9), batch_size=3))
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    seen = []
    with progress.fit(1) as fit:
        for _epoch in fit.epochs():
            a, b = progress.train(first, 0, with_index=True), progress.train(second, 1, with_index=True)
            for source in (a, b, b, a, b):
                index, _batch = next(source)
                seen.append(index)
    assert seen == [0, 0, 1, 1, 2]
    assert [loader.batches for loader in progress.view.train.dataloaders] == [
        ScopeCounts(2, 2, 2),
        ScopeCounts(3, 3, 3),
    ]
