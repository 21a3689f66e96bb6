"""Damaged checkpoint files of each framework: ``progress-tracker inspect``/``diff`` exit 2 with a clear message
(never a traceback, never a hang, never a pickled payload run) and ``newest_intact_checkpoint`` refuses them;
a damage that changes nothing the checkpoint holds may be accepted, but then it reads exactly as the intact one.

Real checkpoints (tests/helpers/saved_checkpoints.py): a Lightning ``.ckpt``, an Ignite ``Checkpoint`` file
and an Accelerate ``save_state`` folder, each damaged in a copy.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("ignite")
pytest.importorskip("accelerate")

import torch

from tracker_core.checkpoints import CheckpointFileError, newest_intact_checkpoint, read_checkpoint
from tracker_core.cli import main

from helpers.saved_checkpoints import Saved, saved_checkpoints

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated", "ignore::UserWarning:pytorch_lightning")

FILES = {"lightning": "lightning/step=2.ckpt", "ignite": "ignite/checkpoint_3.pt"}
ACCELERATE_FILES = ["progress_tracker_0.pt", "model.safetensors", "optimizer.bin", "random_states_0.pkl"]
TARGETS = [*FILES, *(f"accelerate:{name}" for name in ACCELERATE_FILES)]


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Saved:
    return saved_checkpoints(tmp_path_factory)


def _copy_target(saved: Saved, target: str, tmp_path: Path) -> tuple[Path, Path]:
    """(the checkpoint to read, the file in it to damage), copied under ``tmp_path``."""
    root = saved.lightning.parent
    if target in FILES:
        path = tmp_path / Path(FILES[target]).name
        shutil.copy(root / FILES[target], path)
        return path, path
    folder = tmp_path / "mid"
    shutil.copytree(root / "accelerate" / "mid", folder)
    return folder, folder / target.split(":")[1]


def _refused(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The message ``inspect`` and ``diff`` give (exit 2, nothing on stdout, no traceback); ``newest_intact_checkpoint`` raises."""
    assert main(["inspect", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err and str(path) in captured.err
    assert main(["diff", str(path), str(path)]) == 2
    assert "Traceback" not in capsys.readouterr().err
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(CheckpointFileError):
            newest_intact_checkpoint([path])
    return captured.err


def _central_directory_offsets(data: bytes) -> list[int]:
    """Offsets inside a zip's central directory and its end record (what torch.save writes last)."""
    start = data.find(b"PK\x01\x02")
    return sorted(
        {start, start + 1, start + 30, (start + len(data)) // 2, len(data) - 22, len(data) - 10, len(data) - 1}
    )


@pytest.mark.parametrize("target", TARGETS)
def test_a_file_truncated_at_any_of_many_offsets_is_refused(
    target: str, saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, damaged = _copy_target(saved, target, tmp_path)
    data = damaged.read_bytes()
    draw = random.Random(f"truncate {target}")
    offsets = {0, 1, 8, len(data) // 2, *draw.sample(range(len(data)), 12)}
    if data.startswith(b"PK"):
        offsets |= set(_central_directory_offsets(data))
    for offset in sorted(offsets):
        damaged.write_bytes(data[:offset])
        assert "truncated" in _refused(path, capsys) or "empty file" in capsys.readouterr().err + _refused(
            path, capsys
        ), offset


@pytest.mark.parametrize("target", TARGETS)
def test_a_flipped_byte_is_refused_or_changes_nothing_read(
    target: str, saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, damaged = _copy_target(saved, target, tmp_path)
    intact = read_checkpoint(path).entries
    data = damaged.read_bytes()
    draw = random.Random(f"flip {target}")
    refused = 0
    for offset in sorted(draw.sample(range(len(data)), 16)):
        damaged.write_bytes(data[:offset] + bytes([data[offset] ^ 0xFF]) + data[offset + 1 :])
        if main(["inspect", str(path)]) == 2:
            refused += 1
            assert "Traceback" not in capsys.readouterr().err
            continue
        capsys.readouterr()
        assert read_checkpoint(path).entries == intact, f"byte {offset} changed what was read"
    assert refused > 0


@pytest.mark.parametrize("target", TARGETS)
def test_an_empty_file_is_refused(
    target: str, saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, damaged = _copy_target(saved, target, tmp_path)
    damaged.write_bytes(b"")
    assert "empty" in _refused(path, capsys) or target == "accelerate:model.safetensors"


@pytest.mark.parametrize("target", TARGETS)
def test_a_folder_where_a_file_belongs_is_refused(
    target: str, saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, damaged = _copy_target(saved, target, tmp_path)
    damaged.unlink()
    damaged.mkdir()
    (damaged / "inside.txt").write_text("not a checkpoint")
    if path == damaged:  # a folder given where a checkpoint file was: read as a folder without progress files
        assert "no progress entry" in _refused(path, capsys)
    else:
        assert "a folder where a checkpoint file belongs" in _refused(path, capsys)


_INSPECT_EACH = """
import sys
from tracker_core.cli import main
print([main(["inspect", path]) for path in sys.argv[1:]])
"""


def test_a_fifo_where_a_file_belongs_is_refused_without_blocking(saved: Saved, tmp_path: Path) -> None:
    """One child process inspects a FIFO in place of each framework's file (a hang is a timeout, not a stuck run)."""
    paths = []
    for target in [*FILES, "accelerate:model.safetensors", "accelerate:progress_tracker_0.pt"]:
        (tmp_path / target).mkdir()
        path, damaged = _copy_target(saved, target, tmp_path / target)
        damaged.unlink()
        os.mkfifo(damaged)
        paths.append(str(path))
    done = subprocess.run(
        [sys.executable, "-c", _INSPECT_EACH, *paths], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.stdout.strip() == str([2] * len(paths)) and "Traceback" not in done.stderr
    assert done.stderr.count("not a regular file (a FIFO, socket or device)") == len(paths)


def test_a_directory_scan_skips_a_fifo_without_blocking(saved: Saved, tmp_path: Path) -> None:
    shutil.copy(saved.ignite / "checkpoint_3.pt", tmp_path / "checkpoint_3.pt")
    os.mkfifo(tmp_path / "checkpoint_9.pt")
    assert newest_intact_checkpoint(tmp_path) == tmp_path / "checkpoint_3.pt"


class _Payload:
    """Unpickling it would create the file ``marker``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (Path.touch, (str(self.marker),))  # type: ignore[return-value]


@pytest.mark.parametrize("target", [*FILES, "accelerate:progress_tracker_0.pt", "accelerate:optimizer.bin"])
def test_a_pickle_whose_loading_would_run_code_is_refused_and_never_run(
    target: str, saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, damaged = _copy_target(saved, target, tmp_path)
    marker = tmp_path / "payload_ran"
    torch.save({"progress_tracker": _Payload(marker), "gradients": []}, damaged)
    # a file of Accelerate's is refused by the commit, unread
    expected = "optimizer.bin holds other bytes" if target == "accelerate:optimizer.bin" else "weights_only=True"
    assert expected in _refused(path, capsys)
    assert not marker.exists()


def test_a_folder_that_cannot_be_listed_is_an_error_naming_it(
    saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if os.geteuid() == 0:
        pytest.skip("root may list any folder")
    folder = tmp_path / "mid"
    shutil.copytree(saved.accelerate / "mid", folder)
    folder.chmod(0o000)
    try:
        assert main(["inspect", str(folder)]) == 2
    finally:
        folder.chmod(0o755)
    assert str(folder) in capsys.readouterr().err


def test_a_damaged_stateful_loader_state_is_refused_by_inspect_and_passed_over_by_newest_intact_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The loader part, a StatefulDataLoader's own state included, is validated as a load would (no loader needed)."""
    from helpers.fuzz import write_stateful_ignite_entry

    older, newer = tmp_path / "older.pt", tmp_path / "newer.pt"
    write_stateful_ignite_entry(older)
    state = torch.load(older, weights_only=True)
    state["progress_tracker"]["train_loaders"][0]["epoch"]["loader_state"]["_num_yielded"] = "2"
    torch.save(state, newer)
    os.utime(older, ns=(1, 1))
    message = _refused(newer, capsys)
    assert "train_loaders.0.epoch.loader_state._num_yielded" in message
    with pytest.warns(UserWarning, match="skipped a checkpoint newer"):
        assert newest_intact_checkpoint([newer, older]) == older


def test_a_loader_part_that_contradicts_its_own_counts_is_refused_by_inspect(
    saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = _copy_target(saved, "lightning", tmp_path)
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["callbacks"]["ProgressTracker"]["train_loaders"][0]["batches_consumed"] = 99  # 4 batches an epoch
    torch.save(checkpoint, path)
    assert "train_loaders.0.batches_consumed" in _refused(path, capsys)
