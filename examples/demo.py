"""``make demo``: one training run per framework, killed with SIGKILL mid-epoch, resumes exactly.

For Lightning, Ignite and Accelerate in turn, ``examples/crash_safe_training.py`` (a tiny Linear(4, 1) on
10 synthetic samples, batches of 3, gradient accumulation 2, 3 epochs; the framework's own
checkpointer saving after every step) is run three times, each in a new process:

1. uninterrupted;
2. killed with SIGKILL in the middle of an epoch, at a random step;
3. resumed from the newest intact checkpoint the kill left.

Then it compares the resumed run with the uninterrupted one: final weights (``torch.equal``),
the sample ids of every train step (the killed process's steps up to its checkpoint plus the
resumed process's steps), and the progress state without what rightly differs
(``comparable_state``: wall-clock times and the run ledger); and the progress of the three
frameworks with each other. It shows what rightly differs too: the resumed run's ledger, with
the killed run and the work it lost after its last checkpoint (measured from the heartbeat file
each run keeps, ``heartbeat=``). It prints the progress tables and a verdict, and exits 1 on
any difference. Run: ``make demo`` (or ``.venv/bin/python examples/demo.py``).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from crash_safe_training import ACCUMULATION, BATCH_SIZE, BATCHES_PER_EPOCH, EPOCHS, SAMPLES, checkpoints

from tracker_core import Progress, comparable_state
from tracker_core.checkpoints import newest_intact_checkpoint, read_checkpoint
from tracker_core.display._history import history_table
from tracker_core.display._report import progress_table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SCRIPT = HERE / "crash_safe_training.py"
NAMES = {
    "lightning": "PyTorch Lightning (ProgressTracker callback, ModelCheckpoint every step)",
    "ignite": "PyTorch Ignite (ProgressHandler, Checkpoint(n_saved=3) every iteration)",
    "accelerate": "Hugging Face Accelerate (AcceleratorProgress, save_state(total_limit=3) every batch)",
}
PER_EPOCH = BATCHES_PER_EPOCH


@dataclass
class Run:
    ids: list[list[int]]
    result: dict[str, Any]


def _launch(framework: str, workdir: Path, name: str, resume: bool = False) -> subprocess.Popen[str]:
    workdir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(SCRIPT), framework, str(workdir), str(workdir / f"{name}.ids")]
    beats = {**os.environ, "TRACKER_HEARTBEAT_SECONDS": "0"}  # a beat at every optimizer step: lost work exactly
    with open(workdir / f"{name}.log", "w") as log:  # the child's stderr, shown if it fails
        return subprocess.Popen(
            [*command, *(["--resume"] if resume else [])],
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            cwd=ROOT,
            env=beats,
        )


def _finish(child: subprocess.Popen[str], framework: str, workdir: Path, name: str, kill_at: int | None = None) -> Run:
    """Wait for a training process; SIGKILL it once it began its step ``kill_at``."""
    assert child.stdout is not None
    for line in child.stdout:
        if kill_at is not None and line.strip() == f"batch {kill_at}":
            child.send_signal(signal.SIGKILL)
            break
    code = child.wait()
    child.stdout.close()
    if code != (-signal.SIGKILL if kill_at is not None else 0):
        log = (workdir / f"{name}.log").read_text()[-3000:]
        raise SystemExit(f"{log}\n{framework}: the {name} process exited with {code}")
    seen = [json.loads(line) for line in (workdir / f"{name}.ids").read_text().splitlines()]
    result = torch.load(workdir / "result.pt", weights_only=True) if kill_at is None else {}
    return Run(seen, result)


def _where(progress: dict[str, Any]) -> str:
    loaded = Progress()
    loaded.load_state_dict(progress)
    view = loaded.view
    done = view.train.batches.lifetime.completed
    batches = f"{done} train batch{'es' if done != 1 else ''} done"
    if not view.is_mid_epoch:
        return f"{batches}, at an epoch boundary"
    return (
        f"{batches}: epoch {view.epoch_index + 1}, {view.train.batches.epoch.completed} of "
        f"{PER_EPOCH} batches into it{', mid-accumulation' if view.is_mid_accumulation else ''}"
    )


def _framework(framework: str, workdir: Path, kill_at: int) -> tuple[bool, dict[str, Any]]:
    print(f"\n== {NAMES[framework]}", flush=True)
    uninterrupted = _launch(framework, workdir / "straight", "straight")  # runs beside the killed one
    crashed = workdir / "crashed"
    killed = _finish(_launch(framework, crashed, "killed"), framework, crashed, "killed", kill_at)
    straight = _finish(uninterrupted, framework, workdir / "straight", "straight")
    print(f"   1. uninterrupted run: {len(straight.ids)} train steps", flush=True)
    epoch, batch = divmod(kill_at - 1, PER_EPOCH)
    print(
        f"   2. killed with SIGKILL in step {kill_at} (epoch {epoch + 1}, batch {batch + 1} of {PER_EPOCH}); "
        f"it had begun {len(killed.ids)} steps",
        flush=True,
    )
    start = newest_intact_checkpoint(checkpoints(crashed))
    saved = read_checkpoint(start).entries[0]["progress"]
    done = saved["stages"]["train"]["batches"]["lifetime"]["processed"]
    print(f"   3. resuming in a new process from {start.relative_to(crashed)}: {_where(saved)}\n")
    print("      " + progress_table(saved).replace("\n", "\n      ") + "\n", flush=True)
    resumed = _finish(_launch(framework, crashed, "resumed", resume=True), framework, crashed, "resumed")
    a, b = straight.result, resumed.result
    weights = all(torch.equal(x, y) for x, y in zip(a["weights"], b["weights"], strict=True))
    ids = killed.ids[:done] + resumed.ids == straight.ids and killed.ids[done:] == straight.ids[done : len(killed.ids)]
    progress = comparable_state(a["progress"]) == comparable_state(b["progress"])
    lost = len(killed.ids) - done
    print(
        f"   weights bit-identical: {_yes(weights)}; sample ids of all {len(straight.ids)} steps identical: "
        f"{_yes(ids)} ({lost} step{'s' if lost != 1 else ''} lost to the kill, re-read identically); "
        f"progress state identical (without times and run ledger): {_yes(progress)}",
        flush=True,
    )
    print("\n   what rightly differs, the resumed run's ledger (`progress-tracker history`):\n", flush=True)
    print("      " + history_table(b["progress"]).replace("\n", "\n      ") + "\n", flush=True)
    return weights and ids and progress, b["progress"]


def _yes(value: bool) -> str:
    return "yes" if value else "NO"


def main() -> int:
    print(
        f"Training {SAMPLES} samples in batches of {BATCH_SIZE} ({PER_EPOCH} per epoch, the last of "
        f"{SAMPLES - (PER_EPOCH - 1) * BATCH_SIZE}), {EPOCHS} epochs, "
        f"accumulating gradients over {ACCUMULATION} batches."
    )
    pick = random.Random()
    exact: dict[str, bool] = {}
    final: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for framework in NAMES:
            # Mid-epoch: the kill lands in the 2nd or 3rd step of an epoch, after a checkpoint of that epoch.
            # Lightning's ModelCheckpoint saves after optimizer steps only (every 2nd batch): the 3rd step.
            in_epoch = 3 if framework == "lightning" else pick.choice((2, 3))
            kill_at = PER_EPOCH * pick.randrange(EPOCHS) + in_epoch
            workdir = Path(tmp, framework)
            exact[framework], final[framework] = _framework(framework, workdir, kill_at)
    same = all(comparable_state(final[name]) == comparable_state(final["lightning"]) for name in final)
    print(
        "\nFinal progress of the resumed runs "
        + ("(identical in all three frameworks):" if same else "(the frameworks DIFFER; Lightning's shown):")
    )
    print("\n" + progress_table(final["lightning"]) + "\n")
    for framework, ok in exact.items():
        print(
            f"verdict {framework}: "
            + (
                "the resumed run equals the uninterrupted one (weights, ids, progress)"
                if ok
                else "MISMATCH: the resume was not exact"
            )
        )
    print("verdict across frameworks: " + ("the same progress state" if same else "MISMATCH"))
    return 0 if all(exact.values()) and same else 1


if __name__ == "__main__":
    sys.exit(main())
