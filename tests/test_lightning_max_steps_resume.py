"""A max_steps run's last checkpoint, resumed with the real Lightning Trainer (issue 13, item 4 and item 2).

The checkpoint ``ModelCheckpoint`` writes at the batch that reaches ``max_steps`` (in ``on_train_batch_end``)
or at the end of the validation after it, resumed with a larger ``max_steps``; resumed with the same
``max_steps`` (Lightning trains nothing), saved again, and continued on the same Trainer. At every hook
the view agrees with ``trainer.global_step`` and ``trainer.current_epoch`` (the oracle); the lifetime
continues.
"""

from __future__ import annotations

import dataclasses
import importlib
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("torchdata")

import torch
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import InexactResumeWarning, comparable_state, get_progress
from tracker_core.integrations.lightning import STATE_KEY, ProgressTracker

from helpers.lightning_matrix import Config, model, trainer
from helpers.lightning_oracle import Oracle
from helpers.lightning_program import Indexed, Recording
from helpers.lightning_program import trainer as program_trainer

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

# 10 samples in batches of 3: 4 batches an epoch, so max_steps=4 ends at an epoch's last batch
ENDS = {"mid-epoch": 3, "epoch-end": 4}


def _loader(n: int = 10, stateful: bool = False) -> DataLoader[Any]:
    """``stateful``: a StatefulDataLoader, for a run that ends inside an epoch (Lightning resumes its checkpoint at
    the batch by the loader's own state; a plain DataLoader would read that epoch from its start, warned). A run
    that ends at an epoch's end keeps a plain DataLoader: between epochs its resume is exact."""
    if stateful:
        return StatefulDataLoader(Indexed(n), batch_size=3, shuffle=True)
    return DataLoader(Indexed(n), batch_size=3, shuffle=True)


def _inside_an_epoch(max_steps: int) -> bool:
    return max_steps % 4 != 0


def _first_run(tmp_path: Path, max_steps: int, saved_at: str) -> Path:
    """A fit of ``max_steps`` whose ModelCheckpoint writes last.ckpt at the last step or after its validation."""
    pl = importlib.import_module("pytorch_lightning")
    config = Config(max_epochs=-1, max_steps=max_steps)
    every = {"every_n_train_steps": max_steps} if saved_at == "train batch" else {}
    checkpoint = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, save_last=True, save_top_k=0, **every)
    fit = trainer(config, [ProgressTracker(), checkpoint], enable_checkpointing=True, default_root_dir=tmp_path)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        # at the batch that reaches max_steps: the ordinary path, nothing to say (saved after the fit ended, at
        # the validation's end: Lightning resumes it at the next epoch, warned at save)
        warnings.simplefilter("error" if saved_at == "train batch" else "ignore", InexactResumeWarning)
        fit.fit(model(config), _loader(stateful=_inside_an_epoch(max_steps)), _val(saved_at))
    assert fit.global_step == max_steps
    return tmp_path / "last.ckpt"


def _val(saved_at: str) -> DataLoader[Any] | None:
    return _loader(7) if saved_at == "validation end" else None


@pytest.mark.parametrize("saved_at", ["train batch", "validation end"])
@pytest.mark.parametrize("end", ENDS)
def test_the_last_checkpoint_of_a_max_steps_run_resumed_with_more_steps_agrees_with_lightning(
    end: str, saved_at: str, tmp_path: Path
) -> None:
    steps = ENDS[end]
    path = _first_run(tmp_path, steps, saved_at)
    config = Config(max_epochs=-1, max_steps=steps + 4)
    oracle = Oracle()
    fit = trainer(config, [ProgressTracker(), oracle])
    fit.fit(model(config), _loader(stateful=_inside_an_epoch(steps)), _val(saved_at), ckpt_path=path)
    view = get_progress(fit)
    assert (view.global_step, view.epoch_index) == (fit.global_step, fit.current_epoch)
    assert view.global_step == steps + 4
    assert view.train.batches.lifetime.completed == steps + 4  # the lifetime continues
    assert view.run.counts.completed == 1  # the same run, continued
    assert oracle.disagreements == []
    assert oracle.checked > 0


@pytest.mark.parametrize("end", ENDS)
def test_a_checkpoint_saved_after_a_resumed_fit_that_trained_nothing_resumes_like_the_one_it_loaded(
    end: str, tmp_path: Path
) -> None:
    steps = ENDS[end]
    path = _first_run(tmp_path, steps, "train batch")
    config = Config(max_epochs=-1, max_steps=steps)
    idle = trainer(config, [ProgressTracker()])
    idle.fit(
        model(config), _loader(stateful=_inside_an_epoch(steps)), ckpt_path=path
    )  # max_steps reached: Lightning trains nothing
    idle.save_checkpoint(tmp_path / "again.ckpt")
    again = torch.load(tmp_path / "again.ckpt", weights_only=True)["callbacks"][STATE_KEY]
    loaded = torch.load(path, weights_only=True)["callbacks"][STATE_KEY]
    assert again["train_loaders"] == loaded["train_loaders"]
    seen = []
    for checkpoint in (path, tmp_path / "again.ckpt"):
        longer = dataclasses.replace(config, max_steps=steps + 2)
        module = model(longer)
        fit = trainer(longer, [ProgressTracker()])
        torch.manual_seed(1)
        fit.fit(module, _loader(stateful=_inside_an_epoch(steps)), ckpt_path=checkpoint)
        seen.append(module.seen)
    assert seen[0] == seen[1]
    assert len(seen[0]) == 2


@pytest.mark.parametrize("end", ENDS)
def test_a_fit_resumed_at_max_steps_then_continued_on_the_same_trainer_agrees_with_lightning(
    end: str, tmp_path: Path
) -> None:
    steps = ENDS[end]
    path = _first_run(tmp_path, steps, "train batch")
    config = Config(max_epochs=-1, max_steps=steps)
    oracle = Oracle()
    fit = trainer(config, [ProgressTracker(), oracle])
    module = model(config)
    fit.fit(module, _loader(stateful=_inside_an_epoch(steps)), ckpt_path=path)
    fit.save_checkpoint(tmp_path / "again.ckpt")
    fit.validate(module, _loader(7), verbose=False)
    fit.fit_loop.epoch_loop.max_steps = steps + 4
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit.fit(module, _loader(stateful=_inside_an_epoch(steps)))
    # mid-epoch, this fit's data starts a new pass where the loaded position was: said, not silent
    said = [w for w in caught if issubclass(w.category, InexactResumeWarning) and "new pass" in str(w.message)]
    assert said == []  # mid-epoch, its data resumes at the loaded position (Tracker.resume_loaded_again)
    view = get_progress(fit)
    assert (view.global_step, view.epoch_index) == (fit.global_step, fit.current_epoch)
    assert view.global_step == steps + 4
    assert oracle.disagreements == []
    assert view.anomalies == ()  # the continued fit is the same run, also after a validate in between


class _PlainSgd(Recording):
    """Lightning builds new optimizers at every fit, so a momentum buffer never carries over to a fit
    continued on the same Trainer (with or without the tracker): plain SGD lets that fit match one fit."""

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


# the first run's limit, how its checkpoint is written, and the longer limit the continued fit gets
STOPS: dict[str, tuple[dict[str, int], str, dict[str, int]]] = {
    "max_steps mid-epoch, last batch's checkpoint": ({"max_steps": 3, "max_epochs": -1}, "batch", {"max_steps": 7}),
    "max_steps epoch end, last batch's checkpoint": ({"max_steps": 4, "max_epochs": -1}, "batch", {"max_steps": 8}),
    "max_epochs, saved after the fit": ({"max_epochs": 2}, "after fit", {"max_epochs": 4}),
}


def _stateful(limit: dict[str, int], saved: str) -> bool:
    """A StatefulDataLoader for a run whose last step's checkpoint is inside an epoch."""
    return saved == "batch" and _inside_an_epoch(limit["max_steps"])


def _finished_run(tmp_path: Path, limit: dict[str, int], saved: str) -> tuple[Path, list[list[int]], list[str]]:
    """A fit that reaches ``limit``; its checkpoint, the sample ids it trained on, and what the fit warned."""
    pl = importlib.import_module("pytorch_lightning")
    steps = limit.get("max_steps", 1)  # last.ckpt written at the last step
    every = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, save_last=True, save_top_k=0, every_n_train_steps=steps)
    callbacks = [ProgressTracker(), every] if saved == "batch" else [ProgressTracker()]
    torch.manual_seed(0)
    module = _PlainSgd()
    first = program_trainer(callbacks, enable_checkpointing=saved == "batch", default_root_dir=tmp_path, **limit)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first.fit(module, _loader(stateful=_stateful(limit, saved)))
    warned = [str(w.message) for w in caught if issubclass(w.category, InexactResumeWarning)]
    if saved == "batch":
        return tmp_path / "last.ckpt", module.seen, warned
    first.save_checkpoint(tmp_path / "done.ckpt")
    return tmp_path / "done.ckpt", module.seen, warned


@pytest.mark.parametrize("max_steps", [15, 16])  # inside an epoch of 4 batches, and at its last batch
def test_a_max_steps_fit_saving_its_last_step_warns_nothing_and_resumes_exactly_with_more_steps(
    max_steps: int, tmp_path: Path
) -> None:
    path, seen_first, warned = _finished_run(tmp_path, {"max_steps": max_steps, "max_epochs": -1}, "batch")
    assert warned == []
    torch.manual_seed(0)
    straight = _PlainSgd()
    uninterrupted = program_trainer([ProgressTracker()], max_steps=max_steps + 6, max_epochs=-1)
    uninterrupted.fit(straight, _loader(stateful=_inside_an_epoch(max_steps)))
    torch.manual_seed(1)  # the checkpoint's RNGs are loaded
    module = _PlainSgd()
    resumed = program_trainer([ProgressTracker()], max_steps=max_steps + 6, max_epochs=-1)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resumed.fit(module, _loader(stateful=_inside_an_epoch(max_steps)), ckpt_path=path)
    assert [w.message for w in caught if issubclass(w.category, InexactResumeWarning)] == []
    assert seen_first + module.seen == straight.seen
    assert all(torch.equal(a, b) for a, b in zip(module.parameters(), straight.parameters(), strict=True))
    assert comparable_state(get_progress(resumed).state_dict()) == comparable_state(
        get_progress(uninterrupted).state_dict()
    )


@pytest.mark.parametrize("max_steps", [15, 16])
def test_a_fit_resumed_at_its_max_steps_says_lightning_leaves_the_epoch_open(max_steps: int, tmp_path: Path) -> None:
    path, _, _ = _finished_run(tmp_path, {"max_steps": max_steps, "max_epochs": -1}, "batch")
    module = _PlainSgd()
    resumed = program_trainer([ProgressTracker()], max_steps=max_steps, max_epochs=-1)
    epoch = (max_steps - 1) // 4
    with pytest.warns(InexactResumeWarning, match=f"resumed at max_steps={max_steps} inside epoch {epoch} "):
        resumed.fit(module, _loader(stateful=_inside_an_epoch(max_steps)), ckpt_path=path)
    assert module.seen == []
    assert resumed.current_epoch == get_progress(resumed).epoch_index == epoch  # the uninterrupted run's is one more


@pytest.mark.parametrize("between", ["nothing", "save_checkpoint"])
@pytest.mark.parametrize("stop", STOPS)
def test_a_fit_continued_on_the_trainer_whose_resumed_fit_trained_nothing_matches_one_uninterrupted_fit(
    stop: str, between: str, tmp_path: Path
) -> None:
    limit, saved, longer = STOPS[stop]
    torch.manual_seed(0)
    straight = _PlainSgd()
    uninterrupted = program_trainer([ProgressTracker()], **{**limit, **longer})
    uninterrupted.fit(straight, _loader(stateful=_stateful(limit, saved)))
    path, seen_first, _ = _finished_run(tmp_path, limit, saved)
    torch.manual_seed(1)  # the checkpoint's RNGs are loaded
    module = _PlainSgd()
    tracker = ProgressTracker()
    fit = program_trainer([tracker], **limit)
    # one loader for both fits: a StatefulDataLoader(shuffle=True) built between them would draw from the global RNG
    loader = _loader(stateful=_stateful(limit, saved))
    fit.fit(module, loader, ckpt_path=path)  # the limit is reached: Lightning trains nothing
    assert module.seen == []
    if between == "save_checkpoint":
        fit.save_checkpoint(tmp_path / "again.ckpt")
    if "max_steps" in longer:
        fit.fit_loop.epoch_loop.max_steps = longer["max_steps"]
    else:
        fit.fit_loop.max_epochs = longer["max_epochs"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit.fit(module, loader)
    assert [w.message for w in caught if issubclass(w.category, InexactResumeWarning)] == []
    assert seen_first + module.seen == straight.seen
    assert all(torch.equal(a, b) for a, b in zip(module.parameters(), straight.parameters(), strict=True))
    view, whole = get_progress(fit), get_progress(uninterrupted)
    assert (view.global_step, view.epoch_index) == (whole.global_step, whole.epoch_index)
    assert (view.train.batches, view.train.samples) == (whole.train.batches, whole.train.samples)
    assert view.train.dataloaders == whole.train.dataloaders


@pytest.mark.parametrize("steps", [7, 8])  # batch 3 of epoch 1 (0-based), and its last batch (4)
def test_a_checkpoint_saved_after_a_max_steps_fit_says_where_lightning_resumes_it(steps: int, tmp_path: Path) -> None:
    pl = importlib.import_module("pytorch_lightning")
    done = steps - 4
    with pytest.warns(InexactResumeWarning, match=f"goes on at batch {done} of epoch 2"):
        path, _, _ = _finished_run(tmp_path, {"max_steps": steps, "max_epochs": -1}, "after fit")

    class FirstBatch(pl.Callback):  # type: ignore[misc,name-defined]
        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            self.__dict__.setdefault("at", (trainer.current_epoch, batch_idx))

    first = FirstBatch()
    longer = program_trainer([ProgressTracker(), first], max_steps=steps + 2, max_epochs=-1)
    longer.fit(_PlainSgd(), _loader(), ckpt_path=path)
    assert first.at == (2, done)  # as said; the run that saved it would have gone on in epoch 1 or at epoch 2's start


def test_a_checkpoint_saved_after_a_fit_stopped_inside_an_epoch_says_lightning_trains_the_whole_next_epoch(
    tmp_path: Path,
) -> None:
    pl = importlib.import_module("pytorch_lightning")

    class StopAt(pl.Callback):  # type: ignore[misc,name-defined]
        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            trainer.should_stop = trainer.global_step == 6  # after batch 2 of epoch 1 (0-based), as EarlyStopping

    class Batches(pl.Callback):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            self.at: list[tuple[int, int]] = []

        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            self.at.append((trainer.current_epoch, batch_idx))

    stopped = program_trainer([ProgressTracker(), StopAt()], max_epochs=4)
    stopped.fit(_PlainSgd(), _loader(stateful=True))
    with pytest.warns(InexactResumeWarning, match=r"ended \(a stop\) at batch 2 of epoch 1 .* trains all of epoch 2"):
        stopped.save_checkpoint(tmp_path / "stopped.ckpt")
    batches = Batches()
    program_trainer([ProgressTracker(), batches], max_epochs=3).fit(
        _PlainSgd(), _loader(stateful=True), ckpt_path=tmp_path / "stopped.ckpt"
    )
    assert batches.at == [(2, 0), (2, 1), (2, 2), (2, 3)]  # as said


def test_a_new_stateful_loader_given_to_a_fit_continued_after_a_fit_that_trained_nothing_reads_on_from_the_position(
    tmp_path: Path,
) -> None:
    """Lightning loaded the checkpoint's loader state into the idle fit's loader only: the continued fit's new
    StatefulDataLoader gets it too (its construction draws from the global RNG: only the sample ids are compared)."""
    limit, saved, longer = STOPS["max_steps mid-epoch, last batch's checkpoint"]
    torch.manual_seed(0)
    straight = _PlainSgd()
    program_trainer([ProgressTracker()], **{**limit, **longer}).fit(straight, _loader(stateful=True))
    path, seen_first, _ = _finished_run(tmp_path, limit, saved)
    module = _PlainSgd()
    fit = program_trainer([ProgressTracker()], **limit)
    fit.fit(module, _loader(stateful=True), ckpt_path=path)  # the limit is reached: Lightning trains nothing
    fit.fit_loop.epoch_loop.max_steps = longer["max_steps"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit.fit(module, _loader(stateful=True))
    assert [w.message for w in caught if issubclass(w.category, InexactResumeWarning)] == []
    assert seen_first + module.seen == straight.seen
