"""Where the Ignite adapter keeps its heartbeat: beside the files of a ``Checkpoint`` that saves the handler.

Ignite's ``Checkpoint`` does not tell the objects it saves where it writes. The folder is the
``DiskSaver``'s ``dirname`` of the first ``Checkpoint`` registered on the trainer, else on another
engine the handler is attached to (an evaluator's best-model checkpoint), whose ``to_save`` holds
the handler. None: no heartbeat, and a resume records the lost work as ``unknown`` (docs/ignite.md).
"""

from __future__ import annotations

from collections.abc import Iterable

from ignite.engine import Engine

from tracker_core.integrations.ignite._compat import checkpoint_dirnames


def heartbeat_folder(engines: Iterable[Engine], handler: object) -> str | None:
    """The folder of the first ``Checkpoint(..., DiskSaver(dirname))`` on ``engines`` (in order) saving ``handler``."""
    for engine in engines:
        folders = checkpoint_dirnames(engine, holding=handler)
        if folders:
            return folders[0]
    return None
