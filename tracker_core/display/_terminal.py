"""Writing to the screen beside other bars: rich's live line, and tqdm bars a user opened (e.g. Ignite's ProgressBar)."""

from __future__ import annotations

import contextlib
import sys
from typing import Any, TextIO

from tracker_core.display._tqdm_compat import tqdm_bar_open


def write_line(stream: TextIO, line: str) -> None:
    """Write ``line`` to ``stream`` as ``tqdm.write`` does where tqdm is imported: its open bars are cleared first
    and redrawn after (tqdm's public ``external_write_mode``)."""
    module = sys.modules.get("tqdm.std")
    with module.tqdm.external_write_mode(file=stream) if module is not None else contextlib.nullcontext():
        stream.write(line + "\n")
        stream.flush()


class LiveLine:
    """A rich ``Live`` line (a bar and the status text), started on demand and stopped at epoch ends. While a
    tqdm bar is open it draws nothing (two bars on one line garble each other), printing only its kept lines."""

    def __init__(self, stream: TextIO) -> None:
        from rich.console import Console

        self._stream = stream
        self._console = Console(file=stream, force_terminal=True)
        self._live: Any = None

    def show(self, text: str, completed: int, total: int | None) -> None:
        if tqdm_bar_open():
            self.stop()
            return
        from rich.live import Live
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        row = Table.grid(padding=(0, 1))
        row.add_column()
        row.add_column(no_wrap=True, overflow="ellipsis")
        row.add_row(ProgressBar(total=total, completed=completed, width=20), Text(text))
        if self._live is None:
            self._live = Live(row, console=self._console, auto_refresh=False, transient=True)
            self._live.start()
        self._live.update(row, refresh=True)

    def print(self, text: str) -> None:
        if tqdm_bar_open():
            self.stop()
            write_line(self._stream, text)
            return
        from rich.text import Text

        self._console.print(Text(text), soft_wrap=True)

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None
