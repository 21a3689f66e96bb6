"""Rewind a TensorBoard run to a step, dropping what an interrupted process logged there and later."""

from __future__ import annotations

import importlib
import os
from typing import Any


def rewind_summary_writer(writer: Any, step: int) -> str:
    """Make TensorBoard drop the points of ``writer``'s run at ``step`` or later, logged before now.

    Writes into the writer's event file (its public ``file_writer``) what ``SummaryWriter(purge_step=step)``
    writes when it opens, a ``SessionLog.START`` at ``step``: TensorBoard's readers then discard the events at
    steps >= ``step`` read before it. Call it before the resumed run logs anything. ``writer`` is torch's or
    tensorboardX's ``SummaryWriter``; a closed one gets ``purge_step``, written when it reopens its file.

    Returns what keeps the purge from working, or "": TensorBoard reads a run's event files in the order of
    their names, so a file named after this writer's (same second, higher process id) keeps all its points.
    """
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
