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

from helpers.ledger import without_ledger

TESTS = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_script(*args: str, env: dict[str, str], timeout: float = 300) -> None:
    """``python tests/helpers/<args>`` in its own process group; every process it started is killed if it fails to finish."""
    clean = {k: v for k, v in os.environ.items() if k not in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK")}
    path = os.pathsep.join([str(TESTS), str(TESTS.parent)])  # helpers.* and tracker_core
    clean.update(OMP_NUM_THREADS="1", PYTHONPATH=path, MASTER_ADDR="127.0.0.1", **env)
    command = [sys.executable, str(TESTS / "helpers" / args[0]), *args[1:]]
    process = subprocess.Popen(
        command,
        env=clean,
        cwd=TESTS,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
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


def assert_each_rank_trains_its_half_of_every_epoch(
    straight: list[dict[str, Any]], samples: int, batches: int, epochs: int
) -> None:
    """A shuffling DistributedSampler: the two ranks' ids of an epoch are all samples, once; reshuffled per epoch."""
    assert [(r["sampler"], r["shuffle"]) for r in straight] == [("DistributedSampler", True)] * 2
    per_epoch = batches // epochs
    for epoch in range(epochs):
        halves = [sum(r["seen"][epoch * per_epoch : (epoch + 1) * per_epoch], []) for r in straight]
        assert sorted(halves[0] + halves[1]) == list(range(samples))
    assert straight[0]["seen"][:per_epoch] != straight[0]["seen"][per_epoch:]


def assert_synced_totals(straight: list[dict[str, Any]], samples: int, batches: int) -> None:
    """reduce_state sums the samples over ranks, min and max agree on batches per rank, no divergence."""
    for found in straight:
        assert found["sum"]["stages"]["train"]["samples"]["run"] == samples
        assert found["min"]["stages"]["train"]["batches"]["run"] == found["max"]["stages"]["train"]["batches"]["run"]
        assert found["max"]["stages"]["train"]["batches"]["run"]["completed"] == batches
        assert found["divergence"] == []


def assert_every_rank_resumed_exactly(
    folder: Path, run_name: str, config: str, seen_from: int
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Resumed run ``run_name`` equals the straight run of ``config`` on every rank: the sample ids
    from the straight run's step ``seen_from`` on, the weights and the progress. Returns the
    (resumed, straight) pairs, rank by rank, for framework-specific checks."""
    pairs = []
    for rank, (resumed, reference) in enumerate(
        zip(rank_findings(folder, "resume"), rank_findings(folder, "straight"))
    ):
        run, straight = resumed[run_name], reference[config]
        assert run["rank"] == rank
        assert run["seen"] == straight["seen"][seen_from:], f"rank {rank}"
        assert all(torch.equal(a, b) for a, b in zip(run["weights"], straight["weights"], strict=True)), f"rank {rank}"
        assert without_ledger(run["progress"]) == without_ledger(straight["progress"]), f"rank {rank}"
        pairs.append((run, straight))
    return pairs
