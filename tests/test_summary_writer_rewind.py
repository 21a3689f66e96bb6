"""Rewinding a TensorBoard ``SummaryWriter`` through its public attributes only."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytest.importorskip("numpy")  # torch.utils.tensorboard needs it
pytest.importorskip("tensorboard")

from torch.utils.tensorboard import SummaryWriter

from tracker_core.adapter import rewind_summary_writer

from helpers.logger_runs import tensorboard_points


def test_a_closed_summary_writer_rewound_purges_when_it_reopens(tmp_path: Path) -> None:
    writer = SummaryWriter(str(tmp_path))
    for step in range(8):
        writer.add_scalar("a", float(step), step)
    writer.close()
    assert rewind_summary_writer(writer, 5) == ""
    _next_second()
    for step in range(5, 10):
        writer.add_scalar("a", 100.0 + step, step)
    writer.close()
    assert tensorboard_points(tmp_path)["a"] == [(step, float(step)) for step in range(5)] + [
        (step, 100.0 + step) for step in range(5, 10)
    ]


def _next_second() -> None:
    """TensorBoard reads a folder's event files in name order: the creation second, then a process-wide counter
    compared as text ("10" before "9"). A resumed run opens its file in a later second; so does this one."""
    start = int(time.time())
    while int(time.time()) == start:
        time.sleep(0.01)
