"""``progress-tracker history PATH [--json]``: the run ledger of a checkpoint (rank 0's) and goodput."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tracker_core.checkpoints import ProgressCheckpoint
from tracker_core.display._history import history_facts, history_table


def add_history_command(commands: Any) -> None:
    """Add ``history`` to the command line's sub-commands (``argparse`` sub-parsers)."""
    history: argparse.ArgumentParser = commands.add_parser(
        "history", help="list the runs the model's checkpoint recorded (how each ended, its lost work) and goodput"
    )
    history.add_argument("path", help="checkpoint file or folder, or its fsspec URL (as inspect takes)")
    history.add_argument("--json", action="store_true", help="print plain JSON instead of a table")


def print_history(checkpoint: ProgressCheckpoint, as_json: bool) -> int:
    """Print the ledger of rank 0's progress in ``checkpoint``; the exit code (0)."""
    progress = checkpoint.entries[0]["progress"]
    if as_json:
        print(json.dumps({"path": str(checkpoint.path), **history_facts(progress)}, indent=2))
        return 0
    print(f"{checkpoint.path}: {checkpoint.location}")
    print(history_table(progress))
    return 0
