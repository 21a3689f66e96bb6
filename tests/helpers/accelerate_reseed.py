"""A small Accelerate program (real Accelerator on CPU) that saves and stops at a train batch, and resumes
with an optional reseed or draw of the global RNG before its first resumed batch.

10 shuffled samples in batches of 3 (4 batches an epoch) from a StatefulDataLoader (``use_stateful_dataloader``: a
mid-epoch save resumes at its batch), 2 epochs, input dropout: any change of the global RNG changes the weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core.integrations.accelerate import AcceleratorProgress

from helpers.accelerate_drive import Indexed, Setup, fresh_accelerator, seed

BATCHES = 4  # an epoch: 3, 3, 3, 1 samples


def program(resume: bool) -> tuple[Accelerator, torch.nn.Module, torch.optim.Optimizer, Any, AcceleratorProgress]:
    """The program's accelerator, model, optimizer, prepared loader (tracked) and progress, seeded as a first run
    or (``resume``) as a resumed one, before its ``load_state``."""
    seed(7 if resume else 0)
    accelerator = fresh_accelerator(Setup(stateful=True))
    torch.manual_seed(0)  # the same initial weights in every run
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seed(7 if resume else 0)
    model, optimizer, loader = accelerator.prepare(
        model, optimizer, StatefulDataLoader(Indexed(10), batch_size=3, shuffle=True)
    )
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    progress.track_train_loader(loader)
    return accelerator, model, optimizer, loader, progress


def train(path: Path, save_at: int | None = None, after_load: str = "", epoch_draw: bool = False) -> list[torch.Tensor]:
    """Train, saving to ``path`` after train batch ``save_at`` (0-based over the run) and stopping there;
    without ``save_at``, resume from ``path`` if it exists. ``after_load``: ``"set_seed"`` or
    ``"manual_seed"`` right after ``load_state``. ``epoch_draw``: the epoch loop's body draws once
    before its train pass (in every run). Returns the final weights."""
    resume = save_at is None and path.exists()
    accelerator, model, optimizer, loader, progress = program(resume)
    if resume:
        accelerator.load_state(str(path))
        if after_load == "set_seed":
            set_seed(0)
        elif after_load == "manual_seed":
            torch.manual_seed(0)
    position = progress.view.train.batches.lifetime.completed
    with progress.fit(2) as fit:
        for _epoch in fit.epochs():
            if epoch_draw:
                torch.rand(1)
            for _ids, x, y in progress.train(loader):
                with accelerator.accumulate(model):
                    accelerator.backward(torch.nn.functional.mse_loss(model(torch.nn.functional.dropout(x, 0.3)), y))
                    optimizer.step()
                    optimizer.zero_grad()
                if position == save_at:
                    accelerator.save_state(str(path))
                    return [p.detach().clone() for p in model.parameters()]
                position += 1
    return [p.detach().clone() for p in model.parameters()]
