"""One rank of a 2-process Accelerate run (gloo on 127.0.0.1; RANK etc. set by the caller) that trains
Linear(4, 1) and calls ``accelerator.save_state(argv[1])`` after its third batch: a real 2-rank checkpoint folder."""

from __future__ import annotations

import sys
import warnings

import torch
from torch.utils.data import DataLoader

from tracker_core.integrations.accelerate import AcceleratorProgress

from helpers.accelerate_drive import Indexed, Setup, fresh_accelerator, seed


def main(folder: str) -> None:
    warnings.simplefilter("ignore")
    seed(0)
    accelerator = fresh_accelerator(Setup(samples=24, batch_size=3, accumulation=2, seedable=True))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(Indexed(24), batch_size=3, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    with progress.fit(1) as fit:
        for _ in fit.epochs():
            for index, (_, x, y) in enumerate(progress.train(loader)):
                with accelerator.accumulate(model):
                    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                    optimizer.step()
                    optimizer.zero_grad()
                if index == 2:
                    accelerator.save_state(folder)
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main(sys.argv[1])
