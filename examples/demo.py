"""Core-only demo: a plain PyTorch loop killed with SIGKILL mid-epoch resumes exactly.

1. trains a tiny model for 3 epochs without interruption;
2. trains it again in a child process that checkpoints after every batch, and kills that
   process with SIGKILL at a random batch in the middle of an epoch;
3. resumes from the last checkpoint in a fresh process and finishes;
4. compares weights, the sample ids seen and the progress state, and prints a verdict.
Run: make demo   (or .venv/bin/python examples/demo.py)
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

from tracker_core import Tracker
from tracker_core._report import progress_table

EPOCHS, SAMPLES, BATCH = 3, 22, 4  # 6 batches an epoch, the last one short


class Indexed(Dataset[tuple[int, torch.Tensor, torch.Tensor]]):
    """Sample i is (i, x_i, y_i): the id lets us compare which samples were seen."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, i: int) -> tuple[int, torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        return i, torch.randn(8, generator=g), torch.randn(1, generator=g)


def train(workdir: Path, resume: bool, checkpoint_every_batch: bool) -> None:
    """Train to the end (resuming from workdir/ckpt.pt if asked); write the result to workdir."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.2), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loader = DataLoader(Indexed(), batch_size=BATCH, shuffle=True)
    tracker = Tracker()
    tracker.track_train_loader(loader)
    seen: list[int] = []
    if resume:
        ckpt = torch.load(workdir / "ckpt.pt", weights_only=True)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        tracker.load_state_dict(ckpt["progress_tracker"])
        seen = ckpt["seen"]
    progress, stage = tracker.progress, tracker.progress.train
    progress.run_ready("fit")
    progress.run_started()
    while tracker.view.train.epochs.run.completed < EPOCHS:
        stage.epoch_ready()
        stage.epoch_started()
        for ids, x, y in loader:
            stage.batch_ready()
            stage.batch_started()
            loss = torch.nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            stage.optimizer_step()
            stage.batch_processed(len(ids))
            stage.batch_completed()
            seen.extend(ids.tolist())
            if checkpoint_every_batch:
                state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                         "progress_tracker": tracker.state_dict(), "seen": seen}
                torch.save(state, workdir / "ckpt.tmp")
                os.replace(workdir / "ckpt.tmp", workdir / "ckpt.pt")  # a kill never leaves half a file
                print(f"batch {stage._batches.completed}", flush=True)
        stage.epoch_processed()
        stage.epoch_completed()
    progress.run_processed()
    progress.run_completed()
    torch.save({"model": model.state_dict(), "seen": seen, "progress": tracker.state_dict()["progress"]},
               workdir / "result.pt")


def _child(workdir: Path, *flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, __file__, str(workdir), *flags], stdout=subprocess.PIPE, text=True)


def _result(workdir: Path) -> dict[str, Any]:
    return torch.load(workdir / "result.pt", weights_only=True)


def main() -> int:
    batches_per_epoch = -(-SAMPLES // BATCH)
    epoch = random.randrange(EPOCHS)
    kill_at = epoch * batches_per_epoch + random.randrange(1, batches_per_epoch)  # mid-epoch
    with tempfile.TemporaryDirectory() as tmp:
        straight, killed = Path(tmp, "straight"), Path(tmp, "killed")
        straight.mkdir()
        killed.mkdir()
        print("1. uninterrupted run ...", flush=True)
        train(straight, resume=False, checkpoint_every_batch=False)
        print(f"2. run killed with SIGKILL after batch {kill_at} (epoch {epoch + 1}, mid-epoch) ...", flush=True)
        child = _child(killed, "--checkpoint-every-batch")
        assert child.stdout is not None
        for line in child.stdout:
            if line.strip() == f"batch {kill_at}":
                child.send_signal(signal.SIGKILL)
                break
        child.wait()
        saved = torch.load(killed / "ckpt.pt", weights_only=True)["progress_tracker"]["progress"]
        print(f"   killed (exit {child.returncode}); last checkpoint:\n")
        print(progress_table(saved) + "\n")
        print("3. resumed in a fresh process ...", flush=True)
        resumed_child = _child(killed, "--resume")
        resumed_child.communicate()
        a, b = _result(straight), _result(killed)
    same_weights = all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    same_ids = a["seen"] == b["seen"]
    same_progress = json.dumps(a["progress"], sort_keys=True) == json.dumps(b["progress"], sort_keys=True)
    print("\n4. final progress of the resumed run:\n")
    print(progress_table(b["progress"]) + "\n")
    print(f"weights bit-identical: {same_weights}; sample ids identical ({len(a['seen'])}): {same_ids}; "
          f"progress state identical: {same_progress}")
    exact = same_weights and same_ids and same_progress
    print("verdict:", "the resumed run equals the uninterrupted one" if exact else "MISMATCH: the resume was not exact")
    return 0 if exact else 1


if __name__ == "__main__":
    if len(sys.argv) > 1:
        train(Path(sys.argv[1]), resume="--resume" in sys.argv, checkpoint_every_batch="--checkpoint-every-batch" in sys.argv)
    else:
        sys.exit(main())
