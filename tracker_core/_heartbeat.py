"""The heartbeat file (``heartbeat=``): how far a run got after its last checkpoint, so a resume measures what was
lost (docs/schema.md, "The run ledger"). Rank 0 rewrites it atomically when a run starts or ends, at saves, and at
optimizer steps when due."""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracker_core._errors import ProgressStateError
from tracker_core.distributed._elastic import world
from tracker_core.state._ledger import read_entry
from tracker_core.state._readers import read_int, read_list, read_mapping, shown

if TYPE_CHECKING:
    from tracker_core.counting._progress import Progress

_FORMAT = "tracker_core.heartbeat"


class HeartbeatWarning(UserWarning):
    """The heartbeat file could not be written or read; training goes on, lost work may be ``unknown``."""


class Heartbeat:
    """Writes ``progress``'s ledger ``snapshot()`` to ``file`` at most every ``TRACKER_HEARTBEAT_SECONDS``."""

    __slots__ = ("_due", "_every", "_progress", "file")

    def __init__(self, progress: Progress, file: str | os.PathLike[str]) -> None:
        self._progress = progress
        self.file = Path(file)
        try:
            self._every = max(0.0, float(os.environ.get("TRACKER_HEARTBEAT_SECONDS", "30")))
        except ValueError:
            self._every = 30.0
        self._due = 0.0  # time.monotonic() when the next beat is due

    def tick(self) -> None:
        """An optimizer step was taken: beat if one is due (one clock read)."""
        if time.monotonic() >= self._due:
            self.beat()

    def beat(self) -> None:
        """Write the open entry now (nothing when no run is open); a failure warns and stops the beats."""
        self._due = time.monotonic() + self._every
        progress = self._progress
        progress._flush_time()
        snapshot = progress._ledger.snapshot(progress.train)
        if snapshot is None:
            return
        temporary = self.file.with_name(f".{self.file.name}.{os.getpid()}.tmp")
        try:
            self.file.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_text(json.dumps({"format": _FORMAT, **snapshot}))
            os.replace(temporary, self.file)
        except OSError as error:
            progress._heartbeat = None
            warnings.warn(f"cannot write the heartbeat {self.file}: {error}; no more beats", HeartbeatWarning, 2)


def keep_heartbeat(progress: Progress, file: str | os.PathLike[str] | None) -> None:
    """On rank 0, keep ``progress``'s heartbeat in ``file`` and beat now (call it where the run starts and at each
    save); elsewhere, or with ``file=None``, nothing. Beats are ``TRACKER_HEARTBEAT_SECONDS`` (default 30) apart."""
    if file is None or world()[1] != 0:
        return
    current = progress._heartbeat
    if current is None or current.file != Path(file):
        progress._heartbeat = current = Heartbeat(progress, file)
    current.beat()


def read_heartbeat(progress: Progress, file: str | os.PathLike[str] | None) -> None:
    """Give ``progress`` the heartbeat in ``file`` after loading a checkpoint, before the resume re-enters the run.
    No file (``None``, or none there) leaves the lost work ``unknown``; a damaged one warns and is ignored."""
    if file is None:
        return
    file = Path(file)
    try:
        beat = _parse(json.loads(file.read_text()))
    except FileNotFoundError:
        return
    except (OSError, ValueError) as error:  # a ValueError: not JSON, or damaged (a ProgressStateError)
        problem = "damaged heartbeat" if isinstance(error, ProgressStateError) else "cannot read the heartbeat"
        warnings.warn(f"{problem} {file}: {error}; lost work stays unknown", HeartbeatWarning, 2)
    else:
        progress._ledger.heartbeat = beat


def _parse(raw: object) -> dict[str, Any]:
    fields = read_mapping(raw, "", required=("format", "run", "entries"))
    if fields["format"] != _FORMAT:
        raise ProgressStateError("format", f"expected {_FORMAT!r}, got {shown(fields['format'])}")
    entries = read_list(fields["entries"], "entries")
    if not entries:
        raise ProgressStateError("entries", "empty; a heartbeat holds at least the entry of the process that wrote it")
    parsed = [read_entry(entry, f"entries.{i}", last=i == len(entries) - 1) for i, entry in enumerate(entries)]
    return {"run": read_int(fields["run"], "run", minimum=0), "entries": parsed}
