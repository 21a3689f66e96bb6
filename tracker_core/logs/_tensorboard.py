"""Rewind a TensorBoard run to a step: the points logged there and later by an interrupted process go."""

from __future__ import annotations

import importlib
from typing import Any


def rewind_summary_writer(writer: Any, step: int) -> None:
    """Make TensorBoard drop the points of ``writer``'s run at ``step`` or later, logged before now.

    Writes into the writer's current event file what ``SummaryWriter(purge_step=step)`` writes
    when it opens: a ``SessionLog.START`` at ``step``. TensorBoard's readers then discard every
    tag's events at steps >= ``step`` read before it (the interrupted process's, in the same log
    folder) and keep all that this writer logs after it. Call it before the resumed run logs
    anything. ``writer`` is torch's or tensorboardX's ``SummaryWriter``.
    """
    event_pb2: Any = _event_protos()
    file_writer = writer._get_file_writer()
    file_writer.add_event(event_pb2.Event(step=step, file_version="brain.Event:2"))
    file_writer.add_event(
        event_pb2.Event(step=step, session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START))
    )
    file_writer.flush()


def _event_protos() -> Any:
    """TensorBoard's event protos (tensorboardX's where only it is installed), imported when needed."""
    try:
        return importlib.import_module("tensorboard.compat.proto.event_pb2")
    except ImportError:
        return importlib.import_module("tensorboardX.proto.event_pb2")
