"""Tracker: one entry (progress, train loader positions, RNGs) that resumes a plain loop exactly (mid-epoch with
torchdata's StatefulDataLoader; a plain DataLoader between epochs)."""

from __future__ import annotations

import copy
import json
import random
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset

from tracker_core import InexactResumeWarning, ProgressStateError, Tracker
from tracker_core.state._gradients import capture_gradients, restore_gradients

from helpers.core_drive import hand_fit, whole_batch
from helpers.ledger import without_ledger

EPOCHS = 3


class _Indexed(Dataset[tuple[int, torch.Tensor]]):
    def __len__(self) -> int:
        return 11

    def __getitem__(self, index: int) -> tuple[int, torch.Tensor]:
        return index, torch.full((4,), float(index))


def _stateful() -> Any:
    """torchdata's StatefulDataLoader; the test is skipped without torchdata (a core-only install)."""
    return pytest.importorskip("torchdata.stateful_dataloader").StatefulDataLoader


def _setup(
    seed: int, *, plain: bool = False
) -> tuple[Tracker, DataLoader[Any], torch.nn.Module, torch.optim.Optimizer]:
    """A tracked loader (a StatefulDataLoader, which resumes at its batch, or a ``plain`` DataLoader) and a model."""
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = (DataLoader if plain else _stateful())(_Indexed(), batch_size=3, shuffle=True)
    tracker = Tracker()
    tracker.track_train_loader(loader)
    return tracker, loader, model, optimizer


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, tracker: Tracker) -> Callable[[Any], list[int]]:
    """A training step with dropout-like noise, counting its optimizer step; returns the batch's sample ids."""

    def step(batch: Any) -> list[int]:
        ids, x = batch
        noise = torch.rand(1)  # global RNG draw: must continue identically after resume
        loss = (model(x) * noise).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        tracker.progress.train.optimizer_step()
        return list(ids.tolist())

    return step


def _saved(tracker: Tracker, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """A checkpoint: the tracker's entry (through JSON), the weights and the optimizer state."""
    return {
        "entry": json.loads(json.dumps(tracker.state_dict())),
        "model": copy.deepcopy(model.state_dict()),
        "optimizer": copy.deepcopy(optimizer.state_dict()),
    }


def _train(
    tracker: Tracker,
    loader: DataLoader[Any],
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    stop_after: int | None = None,
) -> tuple[list[int], dict[str, Any] | None]:
    """Fit for EPOCHS epochs; return ids seen and, with ``stop_after`` batches, the checkpoint taken after them."""
    checkpoint = None

    def after_batch() -> bool:
        nonlocal checkpoint
        if stop_after is None or tracker.view.train.batches.lifetime.completed != stop_after:
            return False
        checkpoint = _saved(tracker, model, optimizer)
        return True

    seen = hand_fit(tracker, loader, EPOCHS, _step(model, optimizer, tracker), after_batch=after_batch)
    return seen, checkpoint


@pytest.fixture(scope="module")
def uninterrupted() -> tuple[list[int], dict[str, torch.Tensor], dict[str, Any]]:
    tracker, loader, model, optimizer = _setup(seed=0)
    seen, _ = _train(tracker, loader, model, optimizer)
    return seen, model.state_dict(), tracker.state_dict()["progress"]


@pytest.mark.parametrize("stop_after", range(1, 4 * EPOCHS + 1))
def test_a_plain_loop_resumed_from_any_batch_equals_the_uninterrupted_run(stop_after, uninterrupted) -> None:
    tracker, loader, model, optimizer = _setup(seed=0)
    first, checkpoint = _train(tracker, loader, model, optimizer, stop_after=stop_after)
    assert checkpoint is not None
    tracker, loader, model, optimizer = _setup(seed=999)  # fresh objects, different RNG
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    tracker.load_state_dict(checkpoint["entry"])
    rest, _ = _train(tracker, loader, model, optimizer)
    seen, weights, progress = uninterrupted
    assert first + rest == seen
    assert all(torch.equal(model.state_dict()[k], weights[k]) for k in weights)
    assert without_ledger(tracker.state_dict()["progress"]) == without_ledger(progress)


def test_the_entry_is_plain_data_that_survives_json_and_weights_only_load(tmp_path) -> None:
    tracker, loader, model, optimizer = _setup(seed=0)
    _, checkpoint = _train(tracker, loader, model, optimizer, stop_after=2)
    assert checkpoint is not None
    torch.save(checkpoint["entry"], tmp_path / "entry.pt")
    assert torch.load(tmp_path / "entry.pt", weights_only=True) == checkpoint["entry"]


def _entry_mid_epoch() -> dict[str, Any]:
    """Saved after 2 of the 4 batches of the first epoch, from a StatefulDataLoader."""
    tracker, loader, model, optimizer = _setup(seed=0)
    _, checkpoint = _train(tracker, loader, model, optimizer, stop_after=2)
    assert checkpoint is not None
    return checkpoint["entry"]


@pytest.mark.parametrize(
    ("damage", "key", "problem"),
    [
        (lambda e: e.pop("rng"), "rng", "missing"),
        (lambda e: e.update(extra=1), "extra", "unknown key"),
        (
            lambda e: e["progress"]["stages"]["train"]["samples"].update(run=-1),
            "progress.stages.train.samples.run",
            "must be >= 0",
        ),
        (lambda e: e["progress"].update(schema_version=99), "progress.schema_version", "newer"),
        (lambda e: e["train_loaders"][0].pop("epoch"), "train_loaders.0.epoch", "missing"),
        (
            lambda e: e["train_loaders"][0].update(version=2, kind="stateful_dataloader"),
            "train_loaders.0.version",
            "written by a development build",
        ),
        (lambda e: e.update(train_loaders="x"), "train_loaders", "expected a list"),
        (lambda e: e["rng"].update(torch="%%%"), "rng.torch", ""),
    ],
)
def test_a_damaged_entry_raises_naming_the_key_and_changes_nothing(damage, key, problem) -> None:
    entry = _entry_mid_epoch()
    damage(entry)
    tracker, _loader, _, _ = _setup(seed=5)
    before = tracker.state_dict()
    rng_before = torch.get_rng_state()
    with pytest.raises(ProgressStateError) as raised:
        tracker.load_state_dict(entry)
    assert raised.value.key == key
    assert problem in raised.value.problem
    assert torch.equal(torch.get_rng_state(), rng_before)
    after = tracker.state_dict()
    assert after["progress"] == before["progress"]
    assert after["train_loaders"] == before["train_loaders"]


def test_a_loader_tracked_after_the_load_is_armed_when_tracked() -> None:
    entry = _entry_mid_epoch()
    tracker = Tracker()
    tracker.load_state_dict(entry)
    loader = _stateful()(_Indexed(), batch_size=3, shuffle=True)
    tracker.track_train_loader(loader)
    assert len(list(loader)) == 2  # 4 batches an epoch, 2 consumed


class _Stream(IterableDataset[int]):
    def __iter__(self) -> Iterator[int]:
        return iter(range(12))


def test_a_loader_tracked_after_the_load_with_a_mismatching_state_raises_naming_the_key() -> None:
    tracker = Tracker()
    tracker.load_state_dict(_entry_mid_epoch())  # saved from a map-style loader
    with pytest.raises(ProgressStateError, match=r"train_loaders\.0\.kind"):
        tracker.track_train_loader(DataLoader(_Stream(), batch_size=3))


def test_forget_loaded_positions_lets_armed_and_later_tracked_loaders_read_whole_epochs() -> None:
    entry = _entry_mid_epoch()
    tracker, armed, _, _ = _setup(seed=5)
    tracker.load_state_dict(entry)
    tracker.forget_loaded_positions()
    later = _stateful()(_Indexed(), batch_size=3, shuffle=True)
    tracker.track_train_loader(later, index=1)
    assert len(list(armed)) == 4
    assert len(list(later)) == 4


def test_checkpoint_state_dict_in_one_process_without_a_sharded_loader_is_the_plain_entry() -> None:
    tracker, _loader, _, _ = _setup(seed=0)
    assert "ranks" not in tracker.checkpoint_state_dict()


def test_checkpoint_state_dict_with_a_distributed_sampler_carries_every_ranks_entry() -> None:
    tracker = Tracker()
    dataset = _Indexed()
    loader = DataLoader(dataset, batch_size=3, sampler=DistributedSampler(dataset, 1, 0))
    tracker.track_train_loader(loader)
    entry = tracker.checkpoint_state_dict()
    assert [rank["progress"] for rank in entry["ranks"]] == [entry["progress"]]


def _sharded(seed: int) -> tuple[Tracker, DataLoader[Any]]:
    """A tracked StatefulDataLoader over a DistributedSampler: the loop's ``iter()`` builds a resumed iterator."""
    torch.manual_seed(seed)
    dataset = _Indexed()
    loader = _stateful()(dataset, batch_size=3, sampler=DistributedSampler(dataset, 1, 0, shuffle=True, seed=0))
    tracker = Tracker()
    tracker.track_train_loader(loader)
    return tracker, loader


_RESEEDS: dict[str, tuple[Callable[[], object], Callable[[], float]]] = {
    "torch": (lambda: torch.manual_seed(0), lambda: torch.rand(1).item()),
    "random": (lambda: random.seed(0), random.random),
}


@pytest.mark.parametrize("generator", list(_RESEEDS))
def test_a_reseed_between_the_load_and_the_first_batch_of_a_hand_written_loop_is_kept(generator: str) -> None:
    reseed, draw = _RESEEDS[generator]
    tracker, loader = _sharded(seed=0)
    hand_fit(tracker, loader, 1, lambda batch: batch[0].tolist(), after_batch=lambda: True)
    entry = tracker.state_dict()  # after the first of 4 batches
    tracker, loader = _sharded(seed=999)
    tracker.load_state_dict(entry)
    reseed()
    drawn: list[float] = []

    def step(batch: Any) -> list[int]:
        drawn.append(draw())
        return list(batch[0].tolist())

    hand_fit(tracker, loader, 1, step, after_batch=lambda: True)
    reseed()
    assert drawn == [draw()]  # the build's draws undone, the reseed not


def test_a_checkpoint_between_epochs_does_not_replay_the_finished_epoch() -> None:
    tracker, loader, model, optimizer = _setup(seed=0, plain=True)
    _, checkpoint = _train(tracker, loader, model, optimizer, stop_after=4)  # last batch of epoch 1
    assert checkpoint is not None
    tracker.progress.train.epoch_processed()
    tracker.progress.train.epoch_completed()
    entry = tracker.state_dict()
    fresh, loader, _, _ = _setup(seed=3, plain=True)
    fresh.load_state_dict(entry)
    assert len(list(loader)) == 4


def _fit_saving_between_epochs(seed: int, plain_entry: dict[str, Any] | None = None) -> tuple[list[int], Any, Any]:
    """A plain DataLoader's fit of EPOCHS epochs; with ``plain_entry`` resumed from it. Returns the ids seen, the
    weights, and the entry saved after the first epoch ended."""
    tracker, loader, model, optimizer = _setup(seed, plain=True)
    if plain_entry is not None:
        model.load_state_dict(plain_entry["model"])
        optimizer.load_state_dict(plain_entry["optimizer"])
        tracker.load_state_dict(plain_entry["entry"])
    saved = None

    def after_epoch() -> bool:
        nonlocal saved
        if saved is None and plain_entry is None:
            saved = _saved(tracker, model, optimizer)
        return False

    seen = hand_fit(tracker, loader, EPOCHS, _step(model, optimizer, tracker), after_epoch=after_epoch)
    return seen, (model.state_dict(), without_ledger(tracker.state_dict()["progress"])), saved


def test_a_plain_dataloader_resumed_between_epochs_equals_the_uninterrupted_run() -> None:
    seen, (weights, progress), saved = _fit_saving_between_epochs(seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InexactResumeWarning)
        rest, (resumed_weights, resumed_progress), _ = _fit_saving_between_epochs(seed=999, plain_entry=saved)
    assert seen[11:] == rest  # 11 samples an epoch
    assert all(torch.equal(resumed_weights[k], weights[k]) for k in weights)
    assert resumed_progress == progress


def test_a_plain_dataloader_saved_mid_epoch_warns_at_the_save_and_at_the_resume_and_reads_the_epoch_whole() -> None:
    tracker, loader, model, optimizer = _setup(seed=0, plain=True)
    with pytest.warns(InexactResumeWarning, match=r"saving .* after 2 batches of an epoch.*StatefulDataLoader"):
        _, checkpoint = _train(tracker, loader, model, optimizer, stop_after=2)
    assert checkpoint is not None
    fresh, fresh_loader, _, _ = _setup(seed=3, plain=True)
    with pytest.warns(InexactResumeWarning, match=r"resuming .* after 2 batches of an epoch.*StatefulDataLoader"):
        fresh.load_state_dict(checkpoint["entry"])
    assert "_get_iterator" not in vars(fresh_loader)  # nothing installed: the loader is the user's as built
    assert fresh.view.train.batches.epoch.completed == 2  # the counts stay; the epoch is not resumed at its batch
    assert len(list(fresh_loader)) == 4  # a loop over the loader reads its epoch whole


def _inside_a_batch(tracker: Tracker) -> None:
    """A fit's first epoch, its first batch processed (2 samples)."""
    train = tracker.progress.train
    tracker.progress.run_ready("fit")
    train.epoch_ready()
    train.epoch_started()
    train.batch_ready()
    train.batch_started()
    train.batch_processed(2)


def test_a_mid_epoch_checkpoint_of_a_loader_that_is_not_a_dataloader_warns_that_it_cannot_resume_exactly() -> None:
    tracker = Tracker()
    tracker.track_train_loader([torch.zeros(2)] * 3)
    _inside_a_batch(tracker)
    with pytest.warns(InexactResumeWarning, match="not a torch DataLoader"):
        entry = tracker.state_dict()
    assert entry["train_loaders"] == [{"kind": "untracked"}]


def test_a_mid_epoch_checkpoint_of_a_loader_never_given_warns_that_it_was_not_given() -> None:
    tracker = Tracker()  # Ignite's run(None): the process function fetches its own batches
    _inside_a_batch(tracker)
    with pytest.warns(InexactResumeWarning, match="train dataloader 0 was not given to the tracker, so"):
        entry = tracker.state_dict()
    assert entry["train_loaders"] == [{"kind": "untracked"}]


def test_a_checkpoint_between_epochs_of_a_loader_that_is_not_a_dataloader_does_not_warn() -> None:
    tracker = Tracker()
    tracker.track_train_loader([torch.zeros(2)] * 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tracker.state_dict()


class _Stream(IterableDataset[torch.Tensor]):
    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(torch.arange(6.0).split(2))


def _after_the_last_batch_of_a_stream() -> tuple[Tracker, DataLoader[Any]]:
    """A plain loader without a length, tracked, after the last batch of its epoch (no epoch end marked yet), and the
    loader (the tracker holds it weakly)."""
    tracker = Tracker()
    loader = DataLoader(_Stream(), batch_size=None)
    tracker.track_train_loader(loader)
    tracker.progress.run_ready("fit")
    tracker.progress.train.epoch_ready()
    tracker.progress.train.epoch_started()
    for batch in loader:
        whole_batch(tracker.progress, samples=len(batch))
    return tracker, loader


def test_a_loader_without_a_length_saved_after_its_last_batch_is_warned_as_inside_its_epoch() -> None:
    tracker, _loader = _after_the_last_batch_of_a_stream()
    with pytest.warns(InexactResumeWarning, match="StatefulDataLoader"):
        tracker.state_dict()


def test_a_loader_without_a_length_saved_when_the_framework_says_its_epoch_ended_is_saved_between_epochs() -> None:
    tracker, _loader = _after_the_last_batch_of_a_stream()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        entry = tracker.state_dict(epoch_ended=True)
    assert entry["train_loaders"][0]["epoch"] is None
    assert entry["train_loaders"][0]["batches_consumed"] == 3  # all of the ended epoch (elastic resume maps it)


def test_saved_gradients_are_restored_into_fresh_parameters() -> None:
    model = torch.nn.Linear(4, 1)
    model(torch.ones(2, 4)).sum().backward()
    saved = capture_gradients(model.parameters())
    fresh = torch.nn.Linear(4, 1)
    restore_gradients(fresh.parameters(), saved)
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(model.parameters(), fresh.parameters()))


def test_gradients_of_the_wrong_shape_raise_naming_the_index_and_change_nothing() -> None:
    model = torch.nn.Linear(4, 1)
    with pytest.raises(ProgressStateError, match=r"gradients\.1"):
        restore_gradients(model.parameters(), [torch.zeros(1, 4), torch.zeros(3)])
    assert all(p.grad is None for p in model.parameters())


class _FakesItsClass:
    """A wrapper that claims to be a DataLoader (as Accelerate's prepared loaders do)."""

    def __init__(self, loader: DataLoader[Any]) -> None:
        self.base = loader

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return DataLoader

    def __iter__(self) -> Any:
        return iter(self.base)


def test_a_wrapper_faking_the_dataloader_class_is_treated_as_untracked_and_warned_about() -> None:
    wrapper = _FakesItsClass(DataLoader(_Indexed(), batch_size=3))
    assert isinstance(wrapper, DataLoader)
    tracker = Tracker()
    tracker.track_train_loader(wrapper)
    train = tracker.progress.train
    tracker.progress.run_ready("fit")
    train.epoch_ready()
    train.epoch_started()
    train.batch_ready()
    train.batch_started()
    train.batch_processed(3)
    with pytest.warns(InexactResumeWarning, match="_FakesItsClass"):
        assert tracker.state_dict()["train_loaders"] == [{"kind": "untracked"}]


def test_validate_state_dict_raises_what_load_would_and_changes_nothing() -> None:
    tracker = Tracker()
    entry = tracker.state_dict()
    entry["progress"]["stages"]["train"]["samples"]["run"] = -1
    with pytest.raises(ProgressStateError, match=r"progress\.stages\.train\.samples"):
        tracker.validate_state_dict(entry)
    assert tracker.state_dict()["progress"] == Tracker().state_dict()["progress"]


def test_validate_state_dict_leaves_the_global_rngs_alone() -> None:
    entry = Tracker().state_dict()
    torch.manual_seed(1)
    expected = torch.rand(1)
    torch.manual_seed(1)
    Tracker().validate_state_dict(entry)
    assert torch.equal(torch.rand(1), expected)


def test_a_state_dict_before_the_build_holds_the_rngs_as_at_train_iterators_building() -> None:
    loader = DataLoader(_Indexed(), batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(1))
    tracker = Tracker()
    tracker.track_train_loader(loader)
    torch.manual_seed(3)
    tracker.train_iterators_building()
    at_building = tracker.state_dict()
    iter(loader)  # the build draws the loader's generator
    torch.rand(1)  # and anything after it the global RNG
    before_build = tracker.state_dict(before_build=True)
    assert before_build["rng"] == at_building["rng"] != tracker.state_dict()["rng"]
    assert before_build["train_loaders"] == at_building["train_loaders"] != tracker.state_dict()["train_loaders"]
