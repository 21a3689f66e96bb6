"""A bad progress file makes ``load_state`` raise ProgressStateError before anything is loaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("accelerate")

import torch
from torch.utils.data import DataLoader

from tracker_core import ProgressStateError
from tracker_core.integrations import _accelerate_checkpoint as accelerate_file
from tracker_core.integrations.accelerate import AcceleratorProgress

from helpers.accelerate_drive import Indexed, Setup, StopAt, fresh_accelerator, run


def _checkpoint(directory: Path) -> Path:
    run(Setup(samples=13, accumulation=3), stop=StopAt(3), save_dir=str(directory))  # mid-window: has gradients
    return directory / "progress_tracker_0.pt"


def _edit(path: Path, change) -> None:
    saved = torch.load(path, weights_only=True)
    change(saved)
    torch.save(saved, path)


def _as_version_1(saved: dict[str, Any]) -> None:
    """What a version 1 file holds: no world_size, rank or CRC-32s of the other files."""
    keys = ("world_size", "rank", "weights_crc32", "optimizers_crc32", "schedulers_crc32", "scaler_crc32")
    for key in (*keys, "dataloaders_crc32", "random_states_crc32"):
        saved.pop(key)
    saved["version"] = 1


def _assert_load_refused(directory: Path, key: str) -> None:
    accelerator = fresh_accelerator(Setup(samples=13, accumulation=3))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    model, _optimizer, loader = accelerator.prepare(
        model, torch.optim.SGD(model.parameters(), lr=0.1), DataLoader(Indexed(13), batch_size=3, shuffle=True)
    )
    progress = AcceleratorProgress(accelerator)
    progress.track_train_loader(loader)
    weights = [p.detach().clone() for p in model.parameters()]
    rng = torch.get_rng_state()
    before = progress.view.state_dict()
    with pytest.raises(ProgressStateError) as error:
        accelerator.load_state(str(directory))
    assert error.value.key == key
    assert all(torch.equal(p, w) for p, w in zip(model.parameters(), weights))
    assert all(p.grad is None for p in model.parameters())
    assert torch.equal(torch.get_rng_state(), rng)
    assert progress.view.state_dict() == before
    assert accelerator.project_configuration.iteration == 0


def test_a_negative_count_is_refused_and_nothing_is_loaded(tmp_path):
    path = _checkpoint(tmp_path)
    _edit(path, lambda s: s["tracker"]["progress"]["stages"]["train"]["batches"]["lifetime"].update(ready=-1))
    _assert_load_refused(tmp_path, "progress.stages.train.batches.lifetime.ready")


def test_gradients_that_do_not_fit_the_model_are_refused(tmp_path):
    path = _checkpoint(tmp_path)
    _edit(path, lambda s: s["gradients"].__setitem__(0, torch.zeros(3)))
    _assert_load_refused(tmp_path, "gradients.0")


def test_a_bad_loader_position_is_refused(tmp_path):
    path = _checkpoint(tmp_path)
    _edit(path, lambda s: s["tracker"]["train_loaders"][0].update(kind="nonsense"))
    _assert_load_refused(tmp_path, "train_loaders.0.kind")


def test_a_file_that_is_not_a_progress_file_is_refused(tmp_path):
    path = _checkpoint(tmp_path)
    path.write_bytes(b"not a checkpoint")
    _assert_load_refused(tmp_path, "")


def test_a_future_file_version_is_refused(tmp_path):
    path = _checkpoint(tmp_path)
    _edit(path, lambda s: s.update(version=5))
    _assert_load_refused(tmp_path, "version")


def test_a_world_size_below_one_is_refused(tmp_path):
    path = _checkpoint(tmp_path)
    _edit(path, lambda s: s.update(world_size=0))
    _assert_load_refused(tmp_path, "world_size")


def test_a_version_1_file_which_does_not_record_the_world_size_is_read_as_saved_at_the_loading_one(tmp_path):
    path = _checkpoint(tmp_path)
    _edit(path, _as_version_1)
    found = accelerate_file.read_checkpoint(str(tmp_path), 0, 1)
    assert found.ranks is None
    assert found.own.world_size is None
    assert found.own.tracker == torch.load(path, weights_only=True)["tracker"]


def test_a_version_1_file_cannot_be_resumed_by_a_process_that_has_no_file_of_its_own(tmp_path):
    path = _checkpoint(tmp_path)
    _edit(path, _as_version_1)
    with pytest.raises(ProgressStateError) as error:
        accelerate_file.read_checkpoint(str(tmp_path), 1, 2)
    assert error.value.key == "world_size"
