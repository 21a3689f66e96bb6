"""Train with Accelerate, stop mid-epoch right after save_state, resume in a fresh Accelerator, and
check the result equals an uninterrupted run. Run: python examples/accelerate_resume.py"""

from __future__ import annotations

import tempfile

import torch
from accelerate import Accelerator, DataLoaderConfiguration
from accelerate.state import AcceleratorState, GradientState
from torch.utils.data import TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

import tracker_core
from tracker_core.integrations.accelerate import AcceleratorProgress


def train(checkpoint: str, stop_after: int | None = None, resume: bool = False) -> list[torch.Tensor]:
    AcceleratorState._reset_state(True)  # a fresh Accelerator in this process, as in a new one
    GradientState._reset_state()
    torch.manual_seed(0)
    # A StatefulDataLoader keeps its position (its shuffle a sampler with a state of its own), and
    # use_stateful_dataloader keeps it stateful through prepare(): a save inside an epoch resumes at its batch
    config = DataLoaderConfiguration(use_stateful_dataloader=True)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2, dataloader_config=config)
    data = TensorDataset(torch.randn(10, 4), torch.randn(10, 1))
    model = torch.nn.Linear(4, 1)
    model, optimizer, loader = accelerator.prepare(
        model, torch.optim.SGD(model.parameters(), lr=0.1), StatefulDataLoader(data, batch_size=3, shuffle=True)
    )
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    progress.track_train_loader(loader)
    if resume:
        accelerator.load_state(checkpoint)
        view = tracker_core.get_progress(accelerator)
        print(f"resumed in epoch {view.epoch_index} after batch {view.batch_index}, global step {view.global_step}")
    with progress.fit(3) as fit:
        for _epoch in fit.epochs():
            for x, y in fit.train(loader):
                with accelerator.accumulate(model):
                    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                    optimizer.step()
                    optimizer.zero_grad()
                if progress.view.train.batches.lifetime.completed + 1 == stop_after:
                    accelerator.save_state(checkpoint)  # this batch counts as trained
                    return []
    return [p.detach().clone() for p in model.parameters()]


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as directory:
        uninterrupted = train(directory)
        train(directory, stop_after=5)  # "killed" after the 1st batch of epoch 2, mid accumulation window
        resumed = train(directory, resume=True)
        same = all(torch.equal(a, b) for a, b in zip(uninterrupted, resumed))
        print("resumed weights equal the uninterrupted run's:", same)
