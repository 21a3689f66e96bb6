"""Accelerate's progress file: a nested record with a key missing or unknown is refused naming that key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from tracker_core import ProgressStateError
from tracker_core.checkpoints._accelerate import LoaderIteration, SavedProgress, file_name, read, write


def _refused(tmp_path: Path, change: Any) -> ProgressStateError:
    saved = SavedProgress(1, {}, [], 0, [LoaderIteration(3, 0, False, False)], None, 0, {"model.bin": (4, 7)})
    write(str(tmp_path), 0, saved)
    path = tmp_path / file_name(0)
    payload = torch.load(path, weights_only=True)
    change(payload)
    torch.save(payload, path)
    with pytest.raises(ProgressStateError) as error:
        read(str(tmp_path), 0)
    return error.value


@pytest.mark.parametrize(
    ("change", "key", "problem"),
    [
        (lambda p: p["folder"]["model.bin"].pop("crc32"), "folder.model.bin.crc32", "missing"),
        (lambda p: p["folder"]["model.bin"].update(mtime=1), "folder.model.bin.mtime", "unknown key"),
        (lambda p: p["loader_iterations"][0].pop("pass"), "loader_iterations.0.pass", "missing"),
        (lambda p: p["loader_iterations"].__setitem__(0, [3]), "loader_iterations.0", "expected a dict, got list"),
        (lambda p: p.update(evaluation_rng={"stage": "validate"}), "evaluation_rng.rng", "missing"),
        (
            lambda p: p["loader_iterations"][0].update(finished="x" * 1000),
            "loader_iterations.0.finished",
            "characters)",
        ),
    ],
)
def test_a_nested_record_is_refused_naming_the_missing_or_unknown_key(tmp_path, change, key, problem) -> None:
    error = _refused(tmp_path, change)
    assert (error.key, problem in error.problem) == (key, True), error.problem
