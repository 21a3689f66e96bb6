"""A lifetime that lives in the model: the counts travel inside the model's own saved weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tracker_core import Progress, ProgressStateError, track_lifetime, without_lifetime
from tracker_core.adapter import bind_lifetime

from helpers.core_drive import whole_run


def _model() -> torch.nn.Module:
    return torch.nn.Linear(3, 2)


def _trained_for(epochs: int, model: torch.nn.Module) -> Progress:
    progress = Progress()
    bind_lifetime(model, progress)
    whole_run(progress, "fit", epochs=epochs, batches=2)
    return progress


def test_weights_saved_with_torch_save_carry_the_lifetime_into_a_new_run(tmp_path: Path) -> None:
    first = _model()
    track_lifetime(first)
    _trained_for(5, first)
    torch.save(first.state_dict(), tmp_path / "weights.pt")

    second = _model()
    track_lifetime(second)
    second.load_state_dict(torch.load(tmp_path / "weights.pt", weights_only=True))
    progress = _trained_for(2, second)

    assert progress.view.train.epochs.lifetime.completed == 7
    assert progress.view.train.epochs.run.completed == 2
    assert progress.view.train.batches.lifetime.completed == 14


def test_safetensors_files_carry_the_lifetime(tmp_path: Path) -> None:
    first = _model()
    track_lifetime(first)
    _trained_for(3, first)
    save_file(first.state_dict(), str(tmp_path / "weights.safetensors"))

    second = _model()
    track_lifetime(second)
    second.load_state_dict(load_file(str(tmp_path / "weights.safetensors")))

    assert _trained_for(1, second).view.train.epochs.lifetime.completed == 4


def test_a_model_that_did_not_opt_in_loads_tracked_weights_without_the_lifetime_buffer() -> None:
    tracked = _model()
    track_lifetime(tracked)
    _trained_for(1, tracked)
    weights = tracked.state_dict()
    plain = _model()

    with pytest.raises(RuntimeError, match="tracker_core_lifetime"):
        plain.load_state_dict(weights)
    plain.load_state_dict(without_lifetime(weights))

    assert torch.equal(plain.weight, tracked.weight)


def test_a_nested_tracked_module_keeps_its_lifetime_under_its_prefix() -> None:
    inner = _model()
    track_lifetime(inner)
    _trained_for(2, inner)
    outer = torch.nn.Sequential(inner)

    assert "0.tracker_core_lifetime" in outer.state_dict()
    assert "0.tracker_core_lifetime" not in without_lifetime(outer.state_dict())


def test_a_progress_already_ahead_of_the_model_keeps_its_own_counts() -> None:
    model = _model()
    track_lifetime(model)
    _trained_for(1, model)
    model.state_dict()  # the buffer now holds 1 epoch
    ahead = Progress()
    whole_run(ahead, "fit", epochs=3, batches=2)

    assert bind_lifetime(model, ahead) is False
    assert ahead.view.train.epochs.lifetime.completed == 3


def test_an_untracked_model_is_left_alone() -> None:
    model = _model()
    progress = Progress()

    assert bind_lifetime(model, progress) is False
    assert "tracker_core_lifetime" not in model.state_dict()


def test_track_lifetime_twice_is_the_same_as_once() -> None:
    model = _model()
    track_lifetime(model)
    track_lifetime(model)

    assert list(model.state_dict()).count("tracker_core_lifetime") == 1


def test_a_damaged_lifetime_buffer_names_the_buffer_and_changes_nothing() -> None:
    model = _model()
    track_lifetime(model)
    model.load_state_dict({**model.state_dict(), "tracker_core_lifetime": torch.tensor([123, 34], dtype=torch.uint8)})
    progress = Progress()

    with pytest.raises(ProgressStateError, match="tracker_core_lifetime"):
        bind_lifetime(model, progress)
    assert progress.view.train.epochs.lifetime.completed == 0


def test_a_wrapper_binds_the_tracked_module_inside_it_and_continues_its_lifetime() -> None:
    inner = _model()
    track_lifetime(inner)
    _trained_for(2, inner)
    fresh = _model()
    track_lifetime(fresh)
    fresh.load_state_dict(inner.state_dict())

    progress = _trained_for(1, torch.nn.Sequential(fresh))

    saved = json.loads(bytes(fresh.state_dict()["tracker_core_lifetime"].tolist()))
    assert progress.view.train.epochs.lifetime.completed == 3
    assert saved["stages"]["train"]["epochs"]["lifetime"]["completed"] == 3


def test_a_damaged_buffer_in_a_wrapper_binds_nothing() -> None:
    good, damaged = _model(), _model()
    track_lifetime(good)
    track_lifetime(damaged)
    damaged.load_state_dict({**damaged.state_dict(), "tracker_core_lifetime": torch.tensor([1], dtype=torch.uint8)})

    with pytest.raises(ProgressStateError, match="tracker_core_lifetime"):
        bind_lifetime(torch.nn.Sequential(good, damaged), Progress())
    assert good.state_dict()["tracker_core_lifetime"].numel() == 0
