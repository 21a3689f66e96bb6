"""A progress adapter for a hand-written PyTorch loop, built on ``tracker_core.adapter`` alone.

A run stops mid-epoch inside an accumulation window, resumes in fresh objects, and ends bit
for bit like the uninterrupted run: the same weights, the same sample ids, the same progress
counts (its wall-clock times differ, as any two runs' do). docs/adapters.md walks through this file.

Run: .venv/bin/python examples/plain_loop.py [--stop-after N[,N...]] [--out FILE]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import EventOrderError, ProgressView, Tracker, comparable_state, count_optimizer_steps
from tracker_core.adapter import (
    capture_gradients,
    count_scheduler_steps,
    read_mapping,
    register_progress,
    restore_gradients,
    samples_in,
)


class LoopProgress:
    """The adapter: ``epochs()`` and ``batches()`` wrap the loop's two ``for`` statements and mark
    each phase on a Tracker; ``state_dict()`` goes into the loop's checkpoint."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizers: Sequence[torch.optim.Optimizer],
        schedulers: Sequence[torch.optim.lr_scheduler.LRScheduler] = (),
    ) -> None:
        self.tracker = Tracker()
        self._parameters = list(model.parameters())
        self._samples: int | None = None  # samples of the batch in the loop body; None: no batch in flight
        self._processed = False  # that batch was already marked processed (by state_dict)
        self._schedulers = list(schedulers)  # counted from each run's start: after a load restored them
        count_optimizer_steps(self.tracker.progress.train, optimizers)  # torch's step hooks: steps that happen
        register_progress(self, self.tracker.progress)  # tracker_core.get_progress(loop) finds it

    @property
    def view(self) -> ProgressView:
        return self.tracker.view

    def epochs(self, max_epochs: int) -> Iterator[int]:
        """A fit run: the 0-based index of each train epoch to run (after a load, the saved one first)."""
        progress = self.tracker.progress
        progress.run_ready("fit")  # re-entering a loaded run counts nothing
        progress.run_started()
        count_scheduler_steps(progress.train, self._schedulers)  # their last_epoch grows from here
        while (epoch := self.view.epoch_index) < max_epochs:
            progress.train.epoch_ready()  # re-entering a loaded epoch counts nothing
            progress.train.epoch_started()
            yield epoch
            self._end_batch()  # the loop body may have left batches() with break
            progress.train.epoch_processed()
            progress.train.epoch_completed()
        progress.run_processed()
        progress.run_completed()

    def batches(self, loader: DataLoader[Any]) -> Iterator[Any]:
        """The loader's batches; after a load, only those the saved epoch had not consumed yet."""
        self.tracker.track_train_loader(loader)  # positions this very DataLoader (again: no-op)
        train = self.tracker.progress.train
        for batch in loader:
            self._end_batch()
            try:
                train.batch_ready()
                train.batch_started()
            except EventOrderError as error:  # the first law: note it, never raise into the loop
                message = f"a batch came outside an epoch of epochs() ({error})"
                self.tracker.progress.note_anomaly(message, "LoopProgress")
            else:
                self._samples, self._processed = samples_in(batch), False
            yield batch
        self._end_batch()

    def _end_batch(self) -> None:
        """The loop body came back for the next batch: the one it had is processed and completed."""
        if self._samples is None:
            return
        if not self._processed:
            self.tracker.progress.train.batch_processed(self._samples)
        self.tracker.progress.train.batch_completed()
        self._samples = None

    def state_dict(self) -> dict[str, Any]:
        """The checkpoint entry. Call it after the batch's optimizer step (or between epochs): the batch
        in flight then counts as processed, its step is in the weights saved beside it."""
        if self._samples is not None and not self._processed:
            self.tracker.progress.train.batch_processed(self._samples)
            self._processed = True
        return {"tracker": self.tracker.checkpoint_state_dict(), "gradients": capture_gradients(self._parameters)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume; ``ProgressStateError`` names a bad key, and then nothing has changed."""
        read_mapping(state, "", required=("tracker", "gradients"))
        self.tracker.validate_state_dict(state["tracker"])
        restore_gradients(self._parameters, state["gradients"])  # checks all of them, then sets
        self.tracker.load_state_dict(state["tracker"])  # cannot fail now: progress, RNGs, loader position


# The training program -----------------------------------------------------------------------------
SAMPLES, BATCH_SIZE, EPOCHS, ACCUMULATION = 10, 3, 3, 2  # 4 batches an epoch, the last of 1


class Indexed(Dataset[tuple[torch.Tensor, torch.Tensor, int]]):
    """Sample ``i`` is ``(x_i, y_i, i)``, the same values in every process."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(1)
        self.x = torch.randn(SAMPLES, 4, generator=generator)
        self.y = torch.randn(SAMPLES, 1, generator=generator)

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        return self.x[index], self.y[index], index


@dataclass
class Outcome:
    ids: list[list[int]] = field(default_factory=list)
    weights: list[torch.Tensor] = field(default_factory=list)
    progress: dict[str, Any] = field(default_factory=dict)


def train(
    resume_from: Path | None = None, save_to: Path | None = None, stop_after: int | None = None, seed: int = 0
) -> Outcome:
    """Train in fresh objects, as a new process would. ``stop_after``: save to ``save_to`` after that many
    train batches of this call, then stop there (a kill). ``seed`` seeds the global RNGs after the model
    is built: a resumed run draws from the RNG states in its checkpoint instead."""
    torch.manual_seed(0)  # the same initial weights in every process
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    loader = StatefulDataLoader(Indexed(), batch_size=BATCH_SIZE, shuffle=True)  # resumes at its batch
    loop = LoopProgress(model, [optimizer], [scheduler])
    torch.manual_seed(seed)
    if resume_from is not None:
        saved = torch.load(resume_from, weights_only=True)  # plain data and tensors only
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        loop.load_state_dict(saved["progress"])
    outcome = Outcome()
    for _ in loop.epochs(EPOCHS):
        for x, y, ids in loop.batches(loader):
            outcome.ids.append(ids.tolist())
            prediction = model(torch.nn.functional.dropout(x, 0.2))  # draws from the global RNG
            torch.autograd.backward(torch.nn.functional.mse_loss(prediction, y) / ACCUMULATION)
            in_epoch = loop.view.batch_index + 1  # the batch's place in its epoch, also after a resume
            if in_epoch % ACCUMULATION == 0 or in_epoch == len(loader):
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
            if len(outcome.ids) == stop_after and save_to is not None:
                torch.save(
                    {
                        "model": model.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "scheduler": scheduler.state_dict(),
                        "progress": loop.state_dict(),
                    },
                    save_to,
                )
                return outcome
    outcome.weights = [p.detach().clone() for p in model.parameters()]
    outcome.progress = loop.view.state_dict()
    return outcome


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stop-after", default="7", help="train batches before the save, e.g. 7 or 1,4,7")
    parser.add_argument("--out", type=Path, help="save the outcomes there (torch.save)")
    args = parser.parse_args()
    straight = train()
    outcomes: dict[str, Any] = {"straight": vars(straight)}
    exact = True
    for stop_after in [int(n) for n in args.stop_after.split(",")]:
        with tempfile.TemporaryDirectory() as folder:
            checkpoint = Path(folder, "checkpoint.pt")
            stopped = train(save_to=checkpoint, stop_after=stop_after)
            resumed = train(resume_from=checkpoint, seed=1)
        outcomes[f"stopped after {stop_after}"] = vars(stopped)
        outcomes[f"resumed after {stop_after}"] = vars(resumed)
        weights = all(torch.equal(a, b) for a, b in zip(resumed.weights, straight.weights, strict=True))
        ids = stopped.ids + resumed.ids == straight.ids
        # the counts, not the history: the resumed run's ledger also lists the stopped run (docs/schema.md)
        progress = comparable_state(resumed.progress) == comparable_state(straight.progress)
        exact = exact and weights and ids and progress
        print(
            f"stopped after {stop_after} of {len(straight.ids)} train batches, resumed in fresh objects: "
            f"weights bit-identical: {weights}; sample ids identical: {ids}; progress counts identical: {progress}"
        )
    if args.out is not None:
        torch.save(outcomes, args.out)
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
