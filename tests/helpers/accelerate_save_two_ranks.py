"""One rank of a 2-process Accelerate run (gloo on 127.0.0.1; RANK etc. set by the caller) that trains
Linear(4, 1) and calls ``accelerator.save_state(argv[1])`` after its third batch: a real 2-rank checkpoint folder.
With ``main-only`` as argv[2], only rank 0 calls it (rank 0 waits 1 s for rank 1's progress file) and writes the
warnings it gives to ``argv[1] + ".warnings"``."""

from __future__ import annotations

import sys
import warnings

import torch
from torch.utils.data import DataLoader

from tracker_core.integrations.accelerate import AcceleratorProgress, _files

from helpers.accelerate_drive import Indexed, Setup, fresh_accelerator, seed
from helpers.rank_exit import exit_rank


def main(folder: str, main_only: bool) -> None:
    warnings.simplefilter("ignore")
    if main_only:
        _files.PATIENCE_S = 1.0
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
                if index == 2 and not main_only:
                    accelerator.save_state(folder)
                elif index == 2 and accelerator.is_main_process:
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        accelerator.save_state(folder)
                    with open(folder + ".warnings", "w") as out:
                        out.writelines(f"{w.message}\n" for w in caught)
    accelerator.wait_for_everyone()
    accelerator.end_training()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] == ["main-only"])
    exit_rank()
