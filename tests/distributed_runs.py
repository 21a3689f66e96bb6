"""Run a multi-process training script from a test, once per test session (also with pytest-xdist workers)."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

TESTS = Path(__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_script(*args: str, env: dict[str, str], timeout: float = 300) -> None:
    """``python tests/<args>`` in its own process group; every process it started is killed if it fails to finish."""
    clean = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK")}
    clean.update(OMP_NUM_THREADS="1", PYTHONPATH=str(TESTS.parent), MASTER_ADDR="127.0.0.1", **env)
    command = [sys.executable, str(TESTS / args[0]), *args[1:]]
    process = subprocess.Popen(
        command, env=clean, cwd=TESTS, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )
    try:
        _, stderr = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 0, stderr[-4000:]


def folder_once(factory: pytest.TempPathFactory, name: str, fill: Callable[[Path], None]) -> Path:
    """``<session tmp>/<name>``, filled by ``fill(folder)`` by the first worker to get here; the others wait for it."""
    root = factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:
        root = root.parent  # shared by the workers of this session
    folder = root / name
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (folder / "done").exists():
            folder.mkdir(exist_ok=True)
            fill(folder)
            (folder / "done").touch()
    return folder


def rank_findings(folder: Path, phase: str) -> list[dict[str, Any]]:
    """What each of the 2 ranks wrote at ``phase`` (``<phase>-rank<r>.pt``)."""
    return [torch.load(folder / f"{phase}-rank{rank}.pt", weights_only=True) for rank in range(2)]


def assert_each_rank_trains_its_half_of_every_epoch(straight: list[dict[str, Any]], samples: int,
                                                    batches: int, epochs: int) -> None:
    """A shuffling DistributedSampler: the two ranks' ids of an epoch are all samples, once; reshuffled per epoch."""
    assert [(r["sampler"], r["shuffle"]) for r in straight] == [("DistributedSampler", True)] * 2
    per_epoch = batches // epochs
    for epoch in range(epochs):
        halves = [sum(r["seen"][epoch * per_epoch:(epoch + 1) * per_epoch], []) for r in straight]
        assert sorted(halves[0] + halves[1]) == list(range(samples))
    assert straight[0]["seen"][:per_epoch] != straight[0]["seen"][per_epoch:]
