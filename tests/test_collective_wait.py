"""The tracker's collectives wait until the process group drops the tensors they handed over, one second at most
(tracker_core/distributed/_collective.py); the two-rank exits this prevents are in test_two_rank_exits.py."""

from __future__ import annotations

import threading

import pytest
import torch

from tracker_core.distributed import _collective
from tracker_core.distributed._collective import run_collective


def test_the_caller_goes_on_once_the_process_group_drops_the_tensors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_collective, "_PATIENCE", 600.0)
    tensor = torch.zeros(1)
    held = []

    def collective() -> None:  # returns while a thread still holds the tensor, as gloo's worker does
        held.append(tensor)
        threading.Timer(0.05, held.clear).start()

    run_collective(collective, [tensor])

    assert held == []


def test_a_tensor_the_process_group_keeps_holds_the_caller_no_longer_than_its_patience(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_collective, "_PATIENCE", 0.01)
    tensor = torch.zeros(1)
    kept = []

    run_collective(lambda: kept.append(tensor), [tensor])

    assert kept == [tensor]  # returned with the tensor still held
