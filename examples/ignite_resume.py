"""Kill an Ignite run mid-epoch, resume it in fresh objects, and get the same weights bit for bit.

Run: .venv/bin/python examples/ignite_resume.py
"""

from __future__ import annotations

import tempfile

import torch
from ignite.engine import Engine, Events, create_supervised_trainer
from ignite.handlers import Checkpoint, DiskSaver
from torch.utils.data import DataLoader, TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

import tracker_core
from tracker_core.integrations.ignite import ProgressHandler


def make(seed: int) -> tuple[Engine, dict[str, object], DataLoader[tuple[torch.Tensor, ...]]]:
    """Everything a training process builds; ``seed`` differs between processes on purpose."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.2), torch.nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    trainer = create_supervised_trainer(model, optimizer, torch.nn.MSELoss(), gradient_accumulation_steps=2)
    progress = ProgressHandler()
    progress.attach(trainer, optimizers=[optimizer])
    g = torch.Generator().manual_seed(0)  # the data are the same in every process
    data = TensorDataset(torch.randn(22, 4, generator=g), torch.randn(22, 1, generator=g))
    loader = StatefulDataLoader(data, batch_size=4, shuffle=True)  # resumes at its batch
    return trainer, {"trainer": trainer, "model": model, "optimizer": optimizer, "progress": progress}, loader


def main() -> None:
    folder = tempfile.mkdtemp()
    trainer, objects, loader = make(seed=0)
    checkpoint = Checkpoint(objects, DiskSaver(folder, require_empty=False), filename_pattern="{name}.pt")
    trainer.add_event_handler(Events.ITERATION_COMPLETED(once=9), checkpoint)  # epoch 2, batch 3: mid-window
    trainer.run(loader, max_epochs=3)
    straight = objects["model"].state_dict()

    trainer, objects, loader = make(seed=1)  # "a new process"
    Checkpoint.load_objects(objects, f"{folder}/checkpoint.pt")  # torch.load(weights_only=True)
    view = tracker_core.get_progress(trainer)
    print(
        f"resuming at epoch {view.epoch_index}, batch {view.batch_index}, "
        f"{view.global_step} optimizer steps, mid-accumulation: {view.is_mid_accumulation}"
    )
    trainer.run(loader, max_epochs=3)
    same = all(torch.equal(straight[k], v) for k, v in objects["model"].state_dict().items())
    print(
        f"finished: {view.train.batches.run.completed} batches, {view.global_step} steps; "
        f"weights equal to the uninterrupted run: {same}"
    )


if __name__ == "__main__":
    main()
