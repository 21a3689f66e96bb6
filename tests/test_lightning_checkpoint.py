"""What the Lightning adapter puts in the checkpoint, how it refuses damage, and the lifetime scope."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("torchdata")

import pytorch_lightning as pl
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import InexactResumeWarning, ProgressStateError, get_progress
from tracker_core.integrations.lightning import GRADIENTS_KEY, STATE_KEY, ProgressTracker

from helpers.lightning_program import Indexed, Paired, Recording, loader, trainer


class SaveAt(pl.Callback):
    """Saves a checkpoint at the end of train batch number ``at`` (over the run) and stops training."""

    def __init__(self, at: int, path: Path) -> None:
        self.at = at
        self.path = path
        self.count = 0

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self.count += 1
        if self.count == self.at + 1:
            trainer.save_checkpoint(self.path)
            trainer.should_stop = True


def _save(path: Path, at: int = 1, **kwargs: Any) -> None:
    torch.manual_seed(0)
    fit = trainer([ProgressTracker(), SaveAt(at, path)], **kwargs)
    fit.fit(Recording(), loader())


def test_the_checkpoint_loads_with_weights_only_and_holds_the_entry(tmp_path: Path) -> None:
    path = tmp_path / "mid.ckpt"
    _save(path, at=1, accumulate_grad_batches=3)
    checkpoint = torch.load(path, weights_only=True)
    entry = checkpoint["callbacks"][STATE_KEY]
    assert set(entry) == {"progress", "train_loaders", "rng"}
    assert entry["progress"]["stages"]["train"]["batches"]["epoch"]["processed"] == 2
    assert [g.shape for g in checkpoint[GRADIENTS_KEY]] == [torch.Size([1, 4]), (1,), (1, 1), (1,)]


def test_no_gradients_are_saved_outside_an_accumulation_window(tmp_path: Path) -> None:
    path = tmp_path / "mid.ckpt"
    _save(path, at=1)
    assert GRADIENTS_KEY not in torch.load(path, weights_only=True)


def test_a_damaged_entry_fails_before_training_starts(tmp_path: Path) -> None:
    path = tmp_path / "mid.ckpt"
    _save(path)
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["callbacks"][STATE_KEY]["progress"]["stages"]["train"]["batches"]["run"]["ready"] = -3
    torch.save(checkpoint, path)
    model = Recording()
    with pytest.raises(ProgressStateError, match=r"train\.batches"):
        trainer([ProgressTracker()]).fit(model, loader(), ckpt_path=path)
    assert model.seen == []


def test_a_checkpoint_without_an_entry_says_progress_restarts(tmp_path: Path) -> None:
    path = tmp_path / "plain.ckpt"
    fit = trainer([SaveAt(1, path)])
    fit.fit(Recording(), loader())
    with pytest.warns(InexactResumeWarning, match="no progress entry"):
        trainer([ProgressTracker()]).fit(Recording(), loader(), ckpt_path=path)


def test_a_new_fit_from_earlier_weights_starts_the_run_at_zero_and_continues_the_lifetime(tmp_path: Path) -> None:
    path = tmp_path / "done.ckpt"
    first = trainer([ProgressTracker()], enable_checkpointing=False)
    first.fit(Recording(), loader())
    first.save_checkpoint(path)
    checkpoint = torch.load(path, weights_only=True)
    model = Recording()
    model.load_state_dict(checkpoint["state_dict"])
    second = trainer([ProgressTracker(lifetime_from=checkpoint["callbacks"][STATE_KEY])], max_epochs=1)
    second.fit(model, loader())
    view = get_progress(second)
    assert view.global_step == second.global_step == 4
    assert view.train.optimizer_steps == (4, 4, 12)
    assert view.train.epochs.run.completed == 1 and view.train.epochs.lifetime.completed == 3
    assert view.run.counts.completed == 2


def test_a_fit_continued_after_validate_with_a_train_loader_more_than_its_lifetime_counts_its_run_from_its_start(
    tmp_path: Path,
) -> None:
    path = tmp_path / "done.ckpt"
    first = trainer([ProgressTracker()], max_epochs=1)
    first.fit(Recording(), loader())  # one train loader: the lifetime holds its counts
    first.save_checkpoint(path)
    entry = torch.load(path, weights_only=True)["callbacks"][STATE_KEY]
    second = trainer([ProgressTracker(lifetime_from=entry)], max_epochs=1)
    model = Paired()
    second.fit(model, [loader(), loader()])  # a second train loader, new since the lifetime
    second.validate(model, loader())
    second.fit_loop.max_epochs = 2
    second.fit(model, [loader(), loader()])  # Lightning carries on its fit counters
    view = get_progress(second)
    assert view.global_step == second.global_step == 8
    assert view.train.optimizer_steps.lifetime == 12
    assert [d.batches.run for d in view.train.dataloaders] == [8, 8]


def test_lightning_restores_a_stateful_loader_by_its_own_state_and_the_tracker_loads_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "mid.ckpt"
    torch.manual_seed(0)
    trainer([ProgressTracker(), SaveAt(1, path)]).fit(Recording(), StatefulDataLoader(Indexed(), batch_size=3))
    loads: list[dict[str, Any]] = []
    original = StatefulDataLoader.load_state_dict

    def load(self: StatefulDataLoader, state: dict[str, Any]) -> None:
        loads.append(state)
        original(self, state)

    monkeypatch.setattr(StatefulDataLoader, "load_state_dict", load)
    model = Recording()
    trainer([ProgressTracker()], max_epochs=1).fit(model, StatefulDataLoader(Indexed(), batch_size=3), ckpt_path=path)
    # One state only, Lightning's own: the loader's state after the 2 consumed batches (the tracker saves none).
    assert [state["_num_yielded"] for state in loads if state] == [2]  # `{}`: the core drops a kept iterator
    assert model.seen == [[6, 7, 8], [9]]
