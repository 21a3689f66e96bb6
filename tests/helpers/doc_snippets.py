"""The python code blocks of README.md and docs/, and the tiny setups they run with.

Every python block of a page is preceded by a marker line ``<!-- snippet: NAME -->``: NAME is a
setup below (a function that puts the names the block uses, tiny data included, into its
namespace), or ``example`` for docs/adapters.md, whose blocks are text of examples/plain_loop.py
(tests/test_adapters_guide.py checks them and runs the example). A block that reads ``resuming``
is a program run twice, in two processes in one folder: first with ``resuming = False``, then
with ``resuming = True`` (the second run resumes from what the first one saved).

Run one block: ``python -m helpers.doc_snippets PAGE INDEX RESUMING`` (from tests/, in a scratch folder).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^(?:<!-- snippet: (?P<name>[\w-]+) -->\n)?```python\n(?P<code>.*?)^```", re.M | re.S)

Namespace = dict[str, Any]


@dataclass(frozen=True)
class Snippet:
    page: Path
    index: int  # among the page's python blocks
    setup: str | None  # None: the block has no marker
    code: str

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}#{self.index}"

    @property
    def runs_twice(self) -> bool:
        return re.search(r"\bresuming\b", self.code) is not None


def snippets(page: Path) -> list[Snippet]:
    """The page's python blocks, in order."""
    return [
        Snippet(page, i, m["name"], m["code"]) for i, m in enumerate(_BLOCK.finditer(page.read_text(encoding="utf-8")))
    ]


# setups ----------------------------------------------------------------------------------------
def _tensors(samples: int, seed: int = 0) -> Any:
    import torch
    from torch.utils.data import TensorDataset

    generator = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(samples, 4, generator=generator), torch.randn(samples, 1, generator=generator))


def dataset(ns: Namespace) -> None:
    ns["dataset"] = _tensors(64)


def plain_loop(ns: Namespace) -> None:
    from torch.utils.data import DataLoader

    ns["loader"] = DataLoader(_tensors(10), batch_size=3, shuffle=True)
    ns["checkpoint"] = {}


def _lightning_module() -> Any:
    import pytorch_lightning as pl
    import torch

    class Regression(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            x, y = batch
            return torch.nn.functional.mse_loss(self.layer(x), y)

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return Regression()


def lightning(ns: Namespace) -> None:
    """A LightningModule, a 25-batch train loader, and the names a Lightning page's earlier blocks import."""
    import pytorch_lightning as pl
    import torch
    from pytorch_lightning.callbacks import ModelCheckpoint
    from torch.utils.data import DataLoader

    import tracker_core
    from tracker_core.checkpoints import newest_intact_checkpoint
    from tracker_core.integrations.lightning import ProgressTracker

    torch.manual_seed(0)
    ns.update(pl=pl, torch=torch, ModelCheckpoint=ModelCheckpoint, newest_intact_checkpoint=newest_intact_checkpoint)
    ns.update(tracker_core=tracker_core, ProgressTracker=ProgressTracker)
    ns["model"] = _lightning_module()
    ns["train_loader"] = DataLoader(_tensors(75), batch_size=3, shuffle=True)
    ns["loader"] = ns["train_loader"]


def lightning_checkpoint(ns: Namespace) -> None:
    """``lightning`` plus ``path``: a checkpoint written by a fit with a ProgressTracker."""
    from tracker_core.integrations.lightning import ProgressTracker

    lightning(ns)
    trainer = ns["pl"].Trainer(max_epochs=1, callbacks=[ProgressTracker()], logger=False, enable_checkpointing=False)
    trainer.fit(ns["model"], ns["train_loader"])
    trainer.save_checkpoint("model.ckpt")
    ns["path"] = "model.ckpt"


def lightning_ddp_checkpoint(ns: Namespace) -> None:
    """``lightning`` plus ``ds`` and ``path``: a checkpoint of a one-process ``strategy="ddp"`` fit stopped mid-epoch."""
    from torch.utils.data import DataLoader

    from tracker_core.integrations.lightning import ProgressTracker

    lightning(ns)
    ns["ds"] = ds = _tensors(24)
    ns["DataLoader"] = DataLoader
    trainer = ns["pl"].Trainer(
        strategy="ddp", devices=1, max_steps=2, callbacks=[ProgressTracker()], logger=False, enable_checkpointing=False
    )
    trainer.fit(ns["model"], DataLoader(ds, batch_size=6, shuffle=True))
    trainer.save_checkpoint("ddp.ckpt")
    ns["path"] = "ddp.ckpt"
    ns["model"] = _lightning_module()


def lightning_checkpoints(ns: Namespace) -> None:
    """``lightning`` plus the folder ``checkpoints/`` of a fit's ModelCheckpoint, and a new ``trainer`` to resume."""
    from tracker_core.integrations.lightning import ProgressTracker

    lightning(ns)
    checkpoints = ns["ModelCheckpoint"](dirpath="checkpoints", every_n_train_steps=10, save_top_k=-1)
    trainer = ns["pl"].Trainer(max_epochs=1, callbacks=[ProgressTracker(), checkpoints], logger=False)
    trainer.fit(ns["model"], ns["train_loader"])
    ns["model"] = _lightning_module()
    ns["trainer"] = ns["pl"].Trainer(max_epochs=2, callbacks=[ProgressTracker()], logger=False)


def lightning_fitted(ns: Namespace) -> None:
    """``lightning`` plus ``trainer``: a Trainer that ran a fit with a ProgressTracker."""
    import logging

    from tracker_core.integrations.lightning import ProgressTracker

    lightning(ns)
    trainer = ns["pl"].Trainer(max_epochs=1, callbacks=[ProgressTracker()], logger=False, enable_checkpointing=False)
    trainer.fit(ns["model"], ns["train_loader"])
    ns["trainer"] = trainer
    ns["logger"] = logging.getLogger("training")


def _ignite_parts(ns: Namespace) -> None:
    import torch
    from ignite.engine import Events, create_supervised_evaluator, create_supervised_trainer
    from ignite.handlers import Checkpoint, DiskSaver
    from torch.utils.data import DataLoader

    from tracker_core.checkpoints import newest_intact_checkpoint

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    ns.update(
        Events=Events, Checkpoint=Checkpoint, DiskSaver=DiskSaver, newest_intact_checkpoint=newest_intact_checkpoint
    )
    ns.update(torch=torch, DataLoader=DataLoader, model=model, optimizer=optimizer)
    ns["trainer"] = create_supervised_trainer(model, optimizer, torch.nn.functional.mse_loss)
    ns["evaluator"] = create_supervised_evaluator(model)


def ignite(ns: Namespace) -> None:
    """A supervised trainer and evaluator over a Linear model, a 25-batch train loader, the names an Ignite script imports."""
    _ignite_parts(ns)
    ns["train_loader"] = ns["DataLoader"](_tensors(75), batch_size=3, shuffle=True)


def ignite_two_loaders(ns: Namespace) -> None:
    """``ignite`` plus a ``progress`` handler and two loaders of alike batches."""
    from tracker_core.integrations.ignite import ProgressHandler

    _ignite_parts(ns)
    ns["images_loader"] = ns["DataLoader"](_tensors(12, seed=1), batch_size=3, shuffle=True)
    ns["captions_loader"] = ns["DataLoader"](_tensors(9, seed=2), batch_size=3)
    ns["progress"] = ProgressHandler()


def ignite_fitted(ns: Namespace) -> None:
    """``ignite`` plus ``engine``: a trainer that ran with a ProgressHandler."""
    from tracker_core.integrations.ignite import ProgressHandler

    ignite(ns)
    ProgressHandler().attach(ns["trainer"], optimizers=[ns["optimizer"]])
    ns["trainer"].run(ns["train_loader"], max_epochs=1)
    ns["engine"] = ns["trainer"]


def _ignite_resumable(ns: Namespace) -> None:
    from tracker_core.integrations.ignite import ProgressHandler

    _ignite_parts(ns)
    ns["dataset"] = _tensors(48)
    ns["progress"] = ProgressHandler()
    ns["to_save"] = {
        "trainer": ns["trainer"],
        "model": ns["model"],
        "optimizer": ns["optimizer"],
        "progress": ns["progress"],
    }


def ignite_distributed_checkpoint(ns: Namespace) -> None:
    """``ignite`` plus ``dataset``, ``progress``, ``to_save`` and ``ckpt/checkpoint_6.pt``, saved at iteration 6 of a
    run over a DistributedSampler (seed 0, shuffled) at this process's world size, by other objects."""
    import ignite.distributed as idist
    from torch.utils.data import DistributedSampler

    ns.update(idist=idist, DistributedSampler=DistributedSampler)
    _ignite_resumable(ns)
    sampler = DistributedSampler(ns["dataset"], num_replicas=1, rank=0, shuffle=True, seed=0)
    loader = idist.auto_dataloader(ns["dataset"], batch_size=6, sampler=sampler)
    ns["progress"].attach(ns["trainer"], optimizers=[ns["optimizer"]], dataloader=loader)
    at_six = ns["Events"].ITERATION_COMPLETED(once=6)
    ns["trainer"].add_event_handler(at_six, ns["Checkpoint"](ns["to_save"], ns["DiskSaver"]("ckpt"), n_saved=None))
    ns["trainer"].add_event_handler(at_six, lambda engine: engine.terminate())
    ns["trainer"].run(loader, max_epochs=2)
    _ignite_resumable(ns)


def _accelerate_parts(ns: Namespace, batches: int) -> None:
    import torch
    from torch.utils.data import DataLoader

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    ns.update(torch=torch, DataLoader=DataLoader, model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.01))
    ns["train_loader"] = DataLoader(_tensors(3 * batches), batch_size=3, shuffle=True)
    ns["val_loader"] = DataLoader(_tensors(6, seed=1), batch_size=3)
    ns["checkpoint_dir"] = "checkpoint"
    ns["max_epochs"] = 3

    def compute_loss(model: torch.nn.Module, batch: Any) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(model(x), y)

    ns["compute_loss"] = compute_loss


def accelerate_unprepared(ns: Namespace) -> None:
    """A model, optimizer, an 80-batch train loader and a validation loader, not prepared yet; ``compute_loss``."""
    _accelerate_parts(ns, batches=80)


def accelerate(ns: Namespace) -> None:
    """``accelerate_unprepared`` prepared by an ``accelerator`` (4 train batches)."""
    from accelerate import Accelerator

    from tracker_core.integrations.accelerate import AcceleratorProgress

    _accelerate_parts(ns, batches=4)
    accelerator = Accelerator()
    ns["model"], ns["optimizer"], ns["train_loader"], ns["val_loader"] = accelerator.prepare(
        ns["model"], ns["optimizer"], ns["train_loader"], ns["val_loader"]
    )
    ns["accelerator"] = accelerator
    ns["AcceleratorProgress"] = AcceleratorProgress


def accelerate_progress(ns: Namespace) -> None:
    """``accelerate`` plus its ``progress`` and ``loaders`` (two prepared train loaders)."""
    accelerate(ns)
    ns["progress"] = ns["AcceleratorProgress"](ns["accelerator"])
    ns["loaders"] = [ns["train_loader"], ns["accelerator"].prepare(ns["DataLoader"](_tensors(6, seed=2), batch_size=3))]


def tracker(ns: Namespace) -> None:
    """``tracker``: a Tracker in a fit over a plain loader (one process)."""
    import torch
    from torch.utils.data import DataLoader

    from tracker_core import Tracker

    ns["loader"] = DataLoader(torch.arange(6.0), batch_size=3)
    ns["tracker"] = Tracker()
    ns["tracker"].track_train_loader(ns["loader"])


def lifetime(ns: Namespace) -> None:
    """``Net`` (Linear(4, 1)); ``weights`` of a tracked Net, also saved as weights.pt in the current folder."""
    import torch

    from tracker_core import track_lifetime

    torch.manual_seed(0)
    tracked = torch.nn.Linear(4, 1)
    track_lifetime(tracked)
    ns["Net"] = lambda: torch.nn.Linear(4, 1)
    ns["weights"] = tracked.state_dict()
    torch.save(ns["weights"], "weights.pt")


SETUPS: dict[str, Callable[[Namespace], None]] = {
    f.__name__: f
    for f in (
        dataset,
        plain_loop,
        lightning,
        lightning_checkpoint,
        lightning_checkpoints,
        lightning_ddp_checkpoint,
        lightning_fitted,
        ignite,
        ignite_two_loaders,
        ignite_fitted,
        ignite_distributed_checkpoint,
        accelerate_unprepared,
        accelerate,
        accelerate_progress,
        tracker,
        lifetime,
    )
}
EXAMPLE = "example"  # docs/adapters.md: text of examples/plain_loop.py


def run(snippet: Snippet, resuming: bool) -> None:
    """Run ``snippet`` after its setup, in this process and the current folder."""
    assert snippet.setup is not None
    namespace: Namespace = {"__name__": "__snippet__", "resuming": resuming}
    SETUPS[snippet.setup](namespace)
    exec(compile(snippet.code, snippet.name, "exec"), namespace)


if __name__ == "__main__":
    page, index, again = sys.argv[1:]
    run(snippets(ROOT / page)[int(index)], resuming=again == "1")
