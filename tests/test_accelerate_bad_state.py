"""A bad progress file makes ``load_state`` raise ProgressStateError before anything is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("accelerate")

import torch
from torch.utils.data import DataLoader

from tracker_core import ProgressStateError
from tracker_core.integrations.accelerate import AcceleratorProgress

from helpers.accelerate_drive import Indexed, Setup, StopAt, fresh_accelerator, run


def _checkpoint(directory: Path) -> Path:
    run(Setup(samples=13, accumulation=3), stop=StopAt(3), save_dir=str(directory))  # mid-window: has gradients
    return directory / "progress_tracker_0.pt"


def _edit(path: Path, change) -> None:
    saved = torch.load(path, weights_only=True)
    change(saved)
    torch.save(saved, path)


def _assert_load_refused(directory: Path, key: str) -> ProgressStateError:
    accelerator = fresh_accelerator(Setup(samples=13, accumulation=3))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    model, _optimizer, loader = accelerator.prepare(
        model, torch.optim.SGD(model.parameters(), lr=0.1), DataLoader(Indexed(13), batch_size=3, shuffle=True)
    )
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
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
    return error.value


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
    _edit(path, lambda s: s.update(version=6))
    _assert_load_refused(tmp_path, "version")


def test_a_world_size_below_one_is_refused(tmp_path):
    path = _checkpoint(tmp_path)
    _edit(path, lambda s: s.update(world_size=0))
    _assert_load_refused(tmp_path, "world_size")


@pytest.mark.parametrize("version", [1, 4])
def test_a_file_of_a_development_build_is_refused_naming_its_version(tmp_path, version):
    """Versions 1 to 4 (before the commit) were written by development builds: refused, not read as uncommitted."""
    path = _checkpoint(tmp_path)
    _edit(path, lambda s: s.update(version=version))
    assert f"version {version} was written by a development build" in str(_assert_load_refused(tmp_path, "version"))


def test_a_commit_listing_a_path_outside_the_folder_is_refused(tmp_path):
    path = _checkpoint(tmp_path)
    _edit(path, lambda s: s["folder"].update({"../elsewhere.bin": {"size": 1, "crc32": 0}}))
    _assert_load_refused(tmp_path, "folder.../elsewhere.bin")


def test_a_left_flag_of_a_train_loader_pass_that_is_not_a_bool_is_refused(tmp_path):
    path = _checkpoint(tmp_path)
    _edit(path, lambda s: s["loader_iterations"][0].update(left=1))
    _assert_load_refused(tmp_path, "loader_iterations.0.left")


def test_an_evaluation_rng_of_version_1_a_development_builds_is_refused(tmp_path):
    from tracker_core.checkpoints._accelerate import SavedProgress, file_name, read, write
    from tracker_core.data._rng import GlobalRng

    saved = SavedProgress(1, {}, [], 0, [], ("validate", GlobalRng.capture()), 0)
    write(str(tmp_path), 0, saved)
    assert read(str(tmp_path), 0).evaluation_rng[1].to_plain() == saved.evaluation_rng[1].to_plain()
    path = tmp_path / file_name(0)
    assert torch.load(path, weights_only=True)["evaluation_rng"]["rng"]["version"] == 2
    _edit(path, lambda s: s["evaluation_rng"]["rng"].update(version=1))
    with pytest.raises(ProgressStateError, match="written by a development build") as error:
        read(str(tmp_path), 0)
    assert error.value.key == "evaluation_rng.rng.version"
