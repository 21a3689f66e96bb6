"""A tiny two-rank run of one framework with its adapter, ending with a checkpoint; started by
tests/test_two_rank_exits.py.

``python two_rank_exits.py ignite OUT`` spawns its 2 ranks with ``ignite.distributed.Parallel``;
``lightning`` and ``accelerate`` are one rank each, started twice by torch's launcher
(``python -m torch.distributed.run --nproc_per_node 2``). Each rank trains a DDP model on gloo for a few
batches, saves a checkpoint holding the tracker's state as the run ends (the tracker's gather) and, last
thing before the process exits, sums the ranks' progress (``tracker_core.reduce_state``). Each rank first
gives gloo's worker threads the lowest CPU priority (a busy machine): a collective that leaves gloo a tensor
to free after it returned would then often be freed while the interpreter finalizes, which aborts the
process (``tracker_core/distributed/_collective.py``). The test asserts every exit code is 0 and the
checkpoint was written.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import tracker_core

SAMPLES = 12  # 2 ranks x 2 batches of 3


def slow_gloo_threads() -> None:
    """Give this process's gloo worker threads the lowest priority (nice 19), the rest of the process unchanged."""
    for thread in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{thread}/comm") as name:
            if name.read().startswith("pt_gloo_runloop"):
                os.setpriority(os.PRIO_PROCESS, int(thread), 19)


def _data() -> TensorDataset:
    generator = torch.Generator().manual_seed(0)
    return TensorDataset(torch.randn(SAMPLES, 4, generator=generator), torch.randn(SAMPLES, 1, generator=generator))


def _ignite_rank(local_rank: int, out: str) -> None:
    import ignite.distributed as idist
    from ignite.engine import Events, create_supervised_trainer
    from ignite.handlers import Checkpoint, DiskSaver

    from tracker_core.integrations.ignite import ProgressHandler

    slow_gloo_threads()
    model = idist.auto_model(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = create_supervised_trainer(model, optimizer, torch.nn.MSELoss())
    progress = ProgressHandler()
    progress.attach(trainer, optimizers=[optimizer])
    to_save = {"trainer": trainer, "model": model, "optimizer": optimizer, "progress": progress}
    trainer.add_event_handler(Events.COMPLETED, Checkpoint(to_save, DiskSaver(out, require_empty=False)))
    trainer.run(idist.auto_dataloader(_data(), batch_size=6), max_epochs=1)
    tracker_core.reduce_state(tracker_core.get_progress(trainer), "sum")


def _ignite(out: str) -> None:
    import ignite.distributed as idist

    with idist.Parallel(backend="gloo", nproc_per_node=2) as parallel:
        parallel.run(_ignite_rank, out)


def _lightning(out: str) -> None:
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import ModelCheckpoint

    from tracker_core.integrations.lightning import ProgressTracker

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    class SlowGloo(pl.Callback):
        def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
            slow_gloo_threads()  # the process group exists once the strategy is set up

    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=1,
        limit_val_batches=0,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=out,
        callbacks=[ProgressTracker(), ModelCheckpoint(dirpath=out), SlowGloo()],
    )
    trainer.fit(Tiny(), DataLoader(_data(), batch_size=3))
    tracker_core.reduce_state(tracker_core.get_progress(trainer), "sum")


def _accelerate(out: str) -> None:
    from accelerate import Accelerator

    from tracker_core.integrations.accelerate import AcceleratorProgress

    accelerator = Accelerator(cpu=True)
    slow_gloo_threads()
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(_data(), batch_size=3))
    with progress.fit(1) as fit:
        for _ in fit.epochs():
            for x, y in fit.train(loader):
                optimizer.zero_grad()
                accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                optimizer.step()
    accelerator.save_state(out)
    tracker_core.reduce_state(progress.view, "sum")


if __name__ == "__main__":
    {"ignite": _ignite, "lightning": _lightning, "accelerate": _accelerate}[sys.argv[1]](str(Path(sys.argv[2])))
