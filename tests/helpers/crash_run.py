"""A training process to kill with SIGKILL and resume: the crash tests and ``make demo`` start it.

    python tests/helpers/crash_run.py FRAMEWORK WORKDIR IDS_FILE [--resume]

Trains :data:`CRASH` under FRAMEWORK (lightning, ignite, accelerate) with the framework's own
rotating checkpointer writing into ``WORKDIR/checkpoints`` after every optimizer step
(Lightning's ``ModelCheckpoint``) or every batch (Ignite's ``Checkpoint(n_saved=3)``,
Accelerate's ``save_state`` with ``total_limit=3``). At the start of every train step it
appends the step's sample ids as one JSON line to IDS_FILE (one ``write``, then ``fsync``:
a kill loses no line and leaves no half line) and prints ``batch <n>`` (n counts this
process's steps). With ``--resume`` it first resumes from the newest intact checkpoint
(``tracker_core.integrations.checkpoints.newest_intact_checkpoint``), leaving damaged ones in place. At the
end it writes ``WORKDIR/result.pt``: final weights, progress state, the checkpoint it resumed from.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for helpers.*
from helpers.conformance import Saving, Scenario, run  # noqa: E402

CRASH = Scenario("crash", samples=10, batch_size=3, epochs=3, accumulation=2)  # 12 batches, 4 an epoch


def checkpoints(framework: str, workdir: Path) -> Path:
    """The folder that holds the checkpoints (Accelerate puts its automatic ones in ``checkpoints/``)."""
    return workdir / "checkpoints" / "checkpoints" if framework == "accelerate" else workdir / "checkpoints"


def main(framework: str, workdir: Path, ids_file: Path, resume: bool) -> None:
    from tracker_core.integrations.checkpoints import newest_intact_checkpoint

    resume_from = None
    if resume:
        resume_from = newest_intact_checkpoint(checkpoints(framework, workdir))  # damaged ones stay
    descriptor = os.open(ids_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    steps = 0

    def record(ids: list[int]) -> None:
        nonlocal steps
        os.write(descriptor, (json.dumps(ids) + "\n").encode())
        os.fsync(descriptor)
        steps += 1
        print(f"batch {steps}", flush=True)

    outcome = run(framework, CRASH, saving=Saving(workdir / "checkpoints", every_batch=True), resume_from=resume_from,
                  seed=1234 if resume else 0, record=record)
    os.close(descriptor)
    torch.save({"weights": outcome.weights, "progress": outcome.progress,
                "resumed_from": "" if resume_from is None else str(resume_from)}, workdir / "result.pt")


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    from tracker_core import InexactResumeWarning

    warnings.simplefilter("error", InexactResumeWarning)  # a resume that would not be exact fails the process
    main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), resume="--resume" in sys.argv[4:])
