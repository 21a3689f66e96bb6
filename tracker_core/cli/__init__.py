"""``progress-tracker``: ``inspect``, ``history`` or ``diff`` the progress saved in checkpoints (docs/cli.md
gives the commands, their output and exit codes)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from tracker_core._version import __version__
from tracker_core.checkpoints import CheckpointFileError, ProgressCheckpoint, read_checkpoint
from tracker_core.checkpoints._weights_lifetime import FORMAT as WEIGHTS
from tracker_core.checkpoints._weights_lifetime import read_weights_lifetime
from tracker_core.data._device_rng import device_rng_facts
from tracker_core.display._history import history_facts, history_table
from tracker_core.display._report import aligned, progress_facts, progress_table
from tracker_core.state._comparable import comparable_state
from tracker_core.state._schema import flat_leaves

_FORMATS = {
    "lightning": "Lightning checkpoint",
    "ignite": "Ignite checkpoint",
    "plain": "plain-loop checkpoint",
    "accelerate": "Accelerate checkpoint folder",
    WEIGHTS: "model weights with their lifetime (tracker_core.track_lifetime), no trainer checkpoint",
}
_WEIGHTS_ONLY = (
    "weights only: the progress the model carries (its last run's counts); no data positions, generators "
    "or partial gradients, so a run cannot resume exactly from it, only continue the lifetime"
)
_MISSING = object()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exit_:
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        if args.command == "inspect":
            return _inspect(args.path, args.json)
        if args.command == "history":
            return _history(args.path, args.json)
        return _diff(args.a, args.b)
    except BrokenPipeError:  # the reader stopped reading (``| head``): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the flush at exit fails no more
        return 1
    except (CheckpointFileError, OSError) as error:  # an OSError: e.g. a folder it may not list; it names the path
        print(f"progress-tracker: error: {error}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="progress-tracker", description="Inspect the training progress saved in checkpoints."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s (tracker-core) {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    inspect = commands.add_parser(
        "inspect",
        help="show the progress in a Lightning .ckpt, an Ignite checkpoint or an Accelerate folder, or the "
        "lifetime a tracked model's weights carry",
    )
    inspect.add_argument("path", help="checkpoint file or folder, or its fsspec URL (memory://, s3://, ...)")
    inspect.add_argument("--json", action="store_true", help="print plain JSON (all ranks) instead of a table")
    history = commands.add_parser(
        "history", help="list the runs the model's checkpoint recorded (how each ended, its lost work) and goodput"
    )
    history.add_argument("path", help="checkpoint file or folder, or its fsspec URL (as inspect takes)")
    history.add_argument("--json", action="store_true", help="print plain JSON instead of a table")
    diff = commands.add_parser("diff", help="print the progress counts that differ between two checkpoints")
    diff.add_argument("a", help="first checkpoint (file or Accelerate folder)")
    diff.add_argument("b", help="second checkpoint; its format may differ from the first's")
    return parser


def _json_document(checkpoint: ProgressCheckpoint) -> dict[str, Any]:
    """The ``inspect --json`` document: rank 0's progress and facts at the top, every rank in ``ranks``."""
    ranks = [
        {
            "rank": rank,
            "progress": entry["progress"],
            "facts": progress_facts(entry["progress"]),
            "device_rng": device_rng_facts(entry.get("rng")),
        }
        for rank, entry in enumerate(checkpoint.entries)
    ]
    return {
        "path": str(checkpoint.path),
        "format": checkpoint.format,
        "location": checkpoint.location,
        "num_ranks": len(ranks),
        **{key: value for key, value in ranks[0].items() if key != "rank"},
        "ranks": ranks,
    }


def _read(path: str) -> ProgressCheckpoint:
    """The progress in the checkpoint at ``path``, else the lifetime its model weights carry."""
    try:
        return read_checkpoint(path)
    except CheckpointFileError:
        lifetime = read_weights_lifetime(path)
        if lifetime is None:
            raise
        return lifetime


def _inspect(path: str, as_json: bool) -> int:
    checkpoint = _read(path)
    if as_json:
        print(json.dumps(_json_document(checkpoint), indent=2))
        return 0
    print(f"{checkpoint.path}: {_label(checkpoint)}")
    print(f"progress entry: {checkpoint.location}")
    for part in checkpoint.unchecked:
        print(f"not checked: {part}")
    if len(checkpoint.entries) > 1:
        print(f"{len(checkpoint.entries)} ranks; showing rank 0 (--json shows all ranks)")
    print()
    print(progress_table(checkpoint.entries[0]["progress"]))
    if checkpoint.format == WEIGHTS:
        print(_WEIGHTS_ONLY)
    else:
        print(_device_rng_line(device_rng_facts(checkpoint.entries[0].get("rng"))))
    return 0


def _history(path: str, as_json: bool) -> int:
    """Print the run ledger of rank 0's progress in the checkpoint at ``path``, and goodput."""
    checkpoint = _read(path)
    progress = checkpoint.entries[0]["progress"]
    if as_json:
        print(json.dumps({"path": str(checkpoint.path), **history_facts(progress)}, indent=2))
    else:
        print(f"{checkpoint.path}: {checkpoint.location}\n{history_table(progress)}")
    return 0


def _device_rng_line(kinds: list[dict[str, Any]]) -> str:
    """What the entry holds of the accelerator generators, and whether a resume on this machine applies it."""
    if not kinds:
        return "device RNG: none saved (no accelerator was initialised)"
    parts = []
    for kind in kinds:
        sizes, here, name = kind["state_bytes"], kind["devices_here"], kind["kind"]
        size = f"{sizes[0]} bytes each" if len(set(sizes)) == 1 else f"{'/'.join(map(str, sizes))} bytes"
        devices = "1 device" if kind["devices"] == 1 else f"{kind['devices']} devices"
        where = "applied on resume here"
        if not kind["applied_here"]:
            machine = f"{here or 'no'} {name} device{'s' if here > 1 else ''}"
            where = f"reported, not applied: this machine has {machine} (a resume here warns)"
        parts.append(f"{name}, {devices}, generator state {size}; {where}")
    return "device RNG: " + "; ".join(parts)


def _label(checkpoint: ProgressCheckpoint) -> str:
    if checkpoint.location.startswith("meta.pt"):
        return "Lightning sharded checkpoint folder (meta.pt beside torch.distributed.checkpoint shards)"
    return _FORMATS[checkpoint.format]


def _diff(path_a: str, path_b: str) -> int:
    a, b = _read(path_a), _read(path_b)
    rows = [(key, _shown(value_a), _shown(value_b)) for key, value_a, value_b in _differences(a, b)]
    if not rows:
        print(f"identical progress ({_label(a)} and {_label(b)})")
        return 0
    rows.insert(0, ("key", str(a.path), str(b.path)))
    print("\n".join(aligned(rows)))
    return 1


def _differences(a: ProgressCheckpoint, b: ProgressCheckpoint) -> list[tuple[str, object, object]]:
    """(dotted key, value in a, value in b) for every progress count that differs, rank by rank (wall-clock times
    and the run ledger left out: two runs of one training compare equal)."""
    ranks = max(len(a.entries), len(b.entries))
    found: list[tuple[str, object, object]] = []
    if len(a.entries) != len(b.entries):
        found.append(("ranks", len(a.entries), len(b.entries)))
    for rank, (entry_a, entry_b) in enumerate(zip(a.entries, b.entries, strict=False)):
        prefix = f"rank{rank}." if ranks > 1 else ""
        flat_a, flat_b = (flat_leaves(comparable_state(entry["progress"])) for entry in (entry_a, entry_b))
        for key in sorted(set(flat_a) | set(flat_b)):
            value_a, value_b = flat_a.get(key, _MISSING), flat_b.get(key, _MISSING)
            if value_a != value_b:
                found.append((prefix + key, value_a, value_b))
    return found


def _shown(value: object) -> str:
    return "(missing)" if value is _MISSING else json.dumps(value)
