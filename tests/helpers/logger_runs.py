"""Runs that log every step into a real logger, checkpoint, and SIGKILL themselves after logging past the checkpoint.

Run as a script (``python -m helpers.logger_runs <framework> <folder> <kill_at>``) it is the
interrupted process (Lightning: a ``TensorBoardLogger`` and a ``CSVLogger`` in one folder): it logs each step's ``process`` (0: the interrupted run, 1: the resumed one),
checkpoints, and kills itself with SIGKILL at step ``kill_at``. The tests call the same functions
in-process with ``process=1`` to resume (Lightning's: ``helpers.lightning_logger_runs``).
"""

from __future__ import annotations

import csv
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

BATCHES_PER_EPOCH = 4
EPOCHS = 5
CHECKPOINT_EVERY = 6  # optimizer steps: checkpoints at steps 6 and 12 before the kill at 16
KILL_AT = 16


def _die() -> None:
    """SIGKILL this process, a second after its writers opened: TensorBoard orders a run's event files by
    the second each writer opened (then by pid), and the resumed writer's file must come after."""
    time.sleep(1.1)
    os.kill(os.getpid(), signal.SIGKILL)


def _loader() -> DataLoader[Any]:
    x = torch.linspace(-1, 1, 4 * 2 * BATCHES_PER_EPOCH).reshape(-1, 4)
    return DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=2, shuffle=True)


def csv_points(folder: Path, version: int = 0) -> dict[str, list[tuple[int, str]]]:
    """Each metric's ``(step, value as written)`` of ``metrics.csv``, in file order."""
    with open(folder / "run" / f"version_{version}" / "metrics.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    return {
        key: [(int(row["step"]), row[key]) for row in rows if row[key] != ""]
        for key in (rows[0] if rows else {})
        if key != "step"
    }


def tensorboard_points(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Each scalar tag's ``(step, value)`` as TensorBoard reads the run in ``log_dir`` (purges applied)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(log_dir))
    accumulator.Reload()
    return {
        tag: [(event.step, event.value) for event in accumulator.Scalars(tag)] for tag in accumulator.Tags()["scalars"]
    }


def ignite_run(folder: Path, process: int, kill_at: int | None = None, resume_from: str | None = None) -> Any:
    """Train 5 epochs of 4 iterations, logging each iteration into an Ignite ``TensorboardLogger`` (``folder/tb``)
    and saving a ``Checkpoint`` every 6 iterations into ``folder/checkpoints``; returns the logger. Resumed, the
    logger is made after the load with TensorBoard's ``purge_step`` at the restored iteration + 1 (docs/ignite.md)."""
    from ignite.engine import Engine, Events
    from ignite.handlers import Checkpoint, DiskSaver
    from ignite.handlers.tensorboard_logger import TensorboardLogger

    from tracker_core.integrations.ignite import ProgressHandler

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(engine: Engine, batch: Any) -> float:
        x, y = batch
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        return loss.item()

    trainer = Engine(step)
    progress = ProgressHandler()
    progress.attach(trainer, optimizers=[optimizer])
    to_save = {"trainer": trainer, "model": model, "optimizer": optimizer, "progress": progress}
    saver = DiskSaver(str(folder / "checkpoints"), require_empty=False)
    trainer.add_event_handler(
        Events.ITERATION_COMPLETED(every=CHECKPOINT_EVERY), Checkpoint(to_save, saver, n_saved=None)
    )
    purge: dict[str, int] = {}
    if resume_from is not None:
        Checkpoint.load_objects(to_save, torch.load(resume_from, weights_only=True))
        purge["purge_step"] = trainer.state.iteration + 1
    logger = TensorboardLogger(log_dir=str(folder / "tb"), **purge)
    logger.attach_output_handler(
        trainer,
        Events.ITERATION_COMPLETED,
        tag="train",
        output_transform=lambda loss: {"loss": loss, "process": process},
    )
    if kill_at is not None:

        @trainer.on(Events.ITERATION_COMPLETED(once=kill_at))
        def _kill(engine: Engine) -> None:
            logger.writer.flush()
            _die()

    trainer.run(_loader(), max_epochs=EPOCHS)
    logger.close()
    return logger


def accelerate_run(
    folder: Path, process: int, kill_at: int | None = None, resume_from: str | None = None, also: Any = None
) -> None:
    """Train 5 epochs of 4 batches with ``accelerator.log(..., step=progress.view.global_step)`` into the
    tensorboard tracker (``folder/run``) and the tracker ``also``, ``save_state`` every 6 steps into ``folder/step_<N>``."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    from tracker_core.integrations.accelerate import AcceleratorProgress

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True, log_with=["tensorboard", *([also] if also else [])], project_dir=str(folder))
    accelerator.init_trackers("run")
    model = torch.nn.Linear(4, 1)
    model, optimizer, loader = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), _loader())
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    if resume_from is not None:
        accelerator.load_state(resume_from)
    with progress.fit(EPOCHS) as fit:
        for _ in fit.epochs():
            for x, y in progress.train(loader):
                loss = torch.nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                step = progress.view.global_step
                accelerator.log({"loss": loss.item(), "process": process}, step=step)
                if step % CHECKPOINT_EVERY == 0:
                    accelerator.save_state(str(folder / f"step_{step}"))
                if step == kill_at:
                    accelerator.get_tracker("tensorboard", unwrap=True).flush()
                    _die()
    accelerator.end_training()


if __name__ == "__main__":
    framework, where, kill = sys.argv[1:4]
    if framework == "lightning":  # both loggers write into run/version_0
        from helpers.lightning_logger_runs import fit, logger

        both = [logger(kind, Path(where), version=0) for kind in ("tensorboard", "csv")]
        fit(both, process=0, kill_at=int(kill))
    if framework == "ignite":
        ignite_run(Path(where), process=0, kill_at=int(kill))
    if framework == "accelerate":
        accelerate_run(Path(where), process=0, kill_at=int(kill))
    raise SystemExit("not killed")
