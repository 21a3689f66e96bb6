"""A process SIGKILLed at random instants while Lightning (``trainer.save_checkpoint`` into one fixed file),
Ignite (``Checkpoint`` + ``DiskSaver``) or Accelerate (``save_state`` with automatic naming) saves after every
batch: ``newest_intact_checkpoint`` then picks a checkpoint whose progress and weights are those of one and the
same logged save, or refuses them all; never one mixing two saves (tests/helpers/save_kill_frameworks.py).

The Accelerate save into a fixed folder is tests/test_checkpoint_crash_safety.py's. 4 kills per framework in
``make test``, 50 with ``TRACKER_MATRIX=full``, which printed (4 MB checkpoints): Lightning 50 of 50 and Ignite
50 of 50 left one whole save (Lightning writes through an fsspec transaction, Ignite's ``DiskSaver`` through
a temporary file: no kill cut a file); Accelerate 50 of 50, 15 of them after passing over the newer
``checkpoint_N`` the kill had cut.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("ignite")
pytest.importorskip("accelerate")

import torch
from safetensors.torch import load_file

from tracker_core.checkpoints import CheckpointFileError, newest_intact_checkpoint

from helpers.distributed_runs import TESTS
from helpers.save_crc import tensor_crc32

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

FULL = os.environ.get("TRACKER_MATRIX") == "full"
FRAMEWORKS = ("lightning", "ignite", "accelerate")


@pytest.fixture(scope="module")
def zygote() -> Iterator[subprocess.Popen[str]]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent)]))
    process = subprocess.Popen(
        [sys.executable, str(TESTS / "helpers" / "save_kill_frameworks.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=TESTS,
    )
    yield process
    assert process.stdin is not None
    process.stdin.close()
    process.wait(timeout=60)


def _kill_during_saves(zygote: subprocess.Popen[str], framework: str, folder: Path, delay: float) -> str:
    assert zygote.stdin is not None and zygote.stdout is not None
    zygote.stdin.write(f"{framework} {folder} {delay}\n")
    zygote.stdin.flush()
    return zygote.stdout.readline().strip()


def _logged_saves(folder: Path) -> set[tuple[int, frozenset[tuple[str, int]]]]:
    """(train batches processed, weights' CRC-32s) of every save the child began."""
    saves = set()
    for line in Path(f"{folder}.log").read_text().splitlines():
        processed, *weights = line.split()
        saves.add((int(processed), frozenset((k, int(v)) for k, v in (w.split("=") for w in weights))))
    return saves


def _processed(progress: dict[str, Any]) -> int:
    return int(progress["stages"]["train"]["batches"]["lifetime"]["processed"])


def _what_it_holds(framework: str, chosen: Path) -> tuple[int, frozenset[tuple[str, int]]]:
    """(train batches processed, weights' CRC-32s) of the chosen checkpoint."""
    if framework == "accelerate":
        weights = load_file(chosen / "model.safetensors")
        entry = torch.load(chosen / "progress_tracker_0.pt", weights_only=True)["tracker"]
    else:
        checkpoint = torch.load(chosen, weights_only=True)
        if framework == "lightning":
            weights, entry = checkpoint["state_dict"], checkpoint["callbacks"]["ProgressTracker"]
        else:
            weights, entry = checkpoint["model"], checkpoint["progress"]["progress_tracker"]
    crcs = frozenset((str(name), tensor_crc32(tensor)) for name, tensor in weights.items())
    return _processed(entry["progress"]), crcs


def _accepted_one_save(framework: str, folder: Path) -> tuple[bool, bool]:
    """Whether a checkpoint was accepted, and whether a newer damaged one was passed over; an accepted one
    must hold one logged save's progress and weights."""
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            chosen = newest_intact_checkpoint(folder / "checkpoints" if framework == "accelerate" else folder)
    except CheckpointFileError:
        return False, False
    assert _what_it_holds(framework, chosen) in _logged_saves(folder), f"{chosen} mixes saves"
    return True, any("skipped a checkpoint newer" in str(w.message) for w in caught)


def _kills(zygote: subprocess.Popen[str], tmp_path: Path, framework: str, runs: int) -> None:
    draw = random.Random(18)
    accepted = passed_over = 0
    for index in range(runs):
        folder = tmp_path / f"run{index}" / framework
        assert _kill_during_saves(zygote, framework, folder, draw.uniform(0.0, 0.4)) in ("killed", "finished")
        chosen, skipped = _accepted_one_save(framework, folder)
        accepted, passed_over = accepted + chosen, passed_over + skipped
    print(
        f"{framework}: {runs} kills, {accepted} left an intact checkpoint of one save ({passed_over} of them "
        f"after passing over a newer one the kill had cut), {runs - accepted} none"
    )
    assert accepted > 0


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_kill_during_a_frameworks_save_never_leaves_an_accepted_checkpoint_mixing_saves(
    zygote: subprocess.Popen[str], tmp_path: Path, framework: str
) -> None:
    _kills(zygote, tmp_path, framework, 4)


@pytest.mark.matrix
@pytest.mark.skipif(not FULL, reason="50 kills per framework with TRACKER_MATRIX=full (make conformance)")
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_50_kills_during_a_frameworks_saves_never_leave_an_accepted_checkpoint_mixing_saves(
    zygote: subprocess.Popen[str], tmp_path: Path, framework: str
) -> None:
    _kills(zygote, tmp_path, framework, 50)
