"""Rewind a TensorBoard run to a step, dropping what an interrupted process logged there and later."""

from __future__ import annotations

import importlib
import os
from typing import Any


def rewind_summary_writer(writer: Any, step: int) -> str:
    """Make TensorBoard drop the points of ``writer``'s run (torch's or tensorboardX's ``SummaryWriter``) at ``step``
    or later, logged before now: write what ``SummaryWriter(purge_step=step)`` writes when it opens, a
    ``SessionLog.START`` at ``step`` (a closed writer gets ``purge_step``). Call it before the resumed run logs.
    Returns what keeps the purge from working, or "": TensorBoard reads event files in name order, so a file
    named after this writer's (same second, higher process id) keeps all its points."""
    try:  # TensorBoard's event protos, else tensorboardX's (where only it is installed)
        event_pb2: Any = importlib.import_module("tensorboard.compat.proto.event_pb2")
    except ImportError:
        event_pb2 = importlib.import_module("tensorboardX.proto.event_pb2")
    file_writer = writer.file_writer
    if file_writer is None:
        writer.purge_step = step
        return ""
    folder = file_writer.get_logdir()
    file_writer.flush()
    before = _event_file_sizes(folder)
    file_writer.add_event(event_pb2.Event(step=step, file_version="brain.Event:2"))
    file_writer.add_event(
        event_pb2.Event(step=step, session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START))
    )
    file_writer.flush()
    after = _event_file_sizes(folder)
    grown = [name for name, size in after.items() if size != before.get(name)]  # the file the purge went to
    later = sorted(name for name in after if len(grown) == 1 and name > grown[0])
    return f"TensorBoard reads {', '.join(later)} after this run's {grown[0]} (the purge) in {folder}" if later else ""


def _event_file_sizes(folder: str) -> dict[str, int]:
    return {entry.name: entry.stat().st_size for entry in os.scandir(folder) if "tfevents" in entry.name}
