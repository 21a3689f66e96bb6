"""What a terminal shows after a program's output: run it in a pseudo-terminal and replay the bytes on a grid.

The replay knows what rich's live display and tqdm write: ``\\r``, ``\\n``, backspace, cursor up/down/
left/right/column, erase in line; colours and other escape sequences change nothing on the grid.
"""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import termios
from pathlib import Path

_ESCAPE = re.compile(r"\x1b\[([0-9;?]*)([A-Za-z])|\x1b\][^\x07]*\x07|\x1b[()][A-Za-z0-9]|\x1b[=>78]")


def run_in_terminal(args: list[str], cwd: Path, columns: int = 160, timeout: float = 240.0) -> str:
    """The bytes ``args`` writes (stdout and stderr) to a pseudo-terminal ``columns`` wide, decoded."""
    main, child = os.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES", "NO_COLOR")}
    env["TERM"] = "xterm-256color"
    process = subprocess.Popen(args, stdin=child, stdout=child, stderr=child, cwd=cwd, env=env, close_fds=True)
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # the child side closed
            break
        if not data:
            break
        chunks.append(data)
    process.wait(timeout=timeout)
    os.close(main)
    return b"".join(chunks).decode(errors="replace")


def screen(output: str) -> list[str]:
    """The lines a terminal shows after ``output`` (every line written, none scrolled away)."""
    rows: list[list[str]] = [[]]
    row = column = 0

    def put(char: str) -> None:
        nonlocal column
        line = rows[row]
        line.extend(" " * (column + 1 - len(line)))
        line[column] = char
        column += 1

    position = 0
    while position < len(output):
        match = _ESCAPE.match(output, position)
        if match is not None:
            position = match.end()
            params, command = match.group(1), match.group(2)
            if command is None:
                continue
            count = int(params) if params and params.isdigit() else 1
            if command == "A":
                row = max(row - count, 0)
            elif command == "B":
                row += count
            elif command == "C":
                column += count
            elif command == "D":
                column = max(column - count, 0)
            elif command == "G":
                column = count - 1
            elif command == "K":
                mode = int(params) if params.isdigit() else 0
                line = rows[row]
                if mode == 2:
                    line.clear()
                elif mode == 0:
                    del line[column:]
                else:
                    line[: column + 1] = " " * min(column + 1, len(line))
            while len(rows) <= row:
                rows.append([])
            continue
        char = output[position]
        position += 1
        if char == "\r":
            column = 0
        elif char == "\n":
            row += 1
            while len(rows) <= row:
                rows.append([])
        elif char == "\b":
            column = max(column - 1, 0)
        elif char >= " ":
            put(char)
    return ["".join(line).rstrip() for line in rows]
