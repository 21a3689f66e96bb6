"""A checked Accelerate training program: the oracle compares AcceleratorProgress's view with Accelerate's
own counters at every batch, and the same program runs without the adapter for comparison.

``run(config, ...)`` trains Linear(4, 1) with input dropout on one or several train loaders that it
alternates on its own schedule (the loader with the smallest share of its batches taken goes next),
validates after each epoch on a shuffled loader while drawing from the global RNG, and can break out
of a train or validation loop, raise inside a step (caught outside, then a new ``epochs`` loop), save
and stop at a given batch, or start by loading a checkpoint. With ``tracked=False`` the same program
runs on plain ``range``/``enumerate``. The oracle (tracked runs) checks at each train batch:

* ``accelerator.step % gradient_accumulation_steps == view.train.accumulating_batches``;
* the loader's ``end_of_dataloader`` is set exactly at its last batch by the view's per-loader count;
* the loader's ``iteration`` (passes run to their end) is the lifetime train epochs completed less
  the passes of this loader the program cut short (kept in a state registered for checkpointing);
* the in-epoch index the adapter gives with the batch is the program's own count of that loader.

and at each validation batch ``end_of_dataloader`` and the view's batch index. Disagreements are
collected in ``Trace.disagreements``.
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Generator, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import DataLoaderConfiguration
from torch.utils.data import DataLoader, Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core.integrations.accelerate import AcceleratorProgress

from helpers.ledger import without_ledger


class Offset(Dataset[tuple[int, torch.Tensor, torch.Tensor]]):
    """Sample ``i`` is ``(offset + i, x, y)`` with values fixed by the id."""

    def __init__(self, size: int, offset: int) -> None:
        self.size, self.offset = size, offset

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[int, torch.Tensor, torch.Tensor]:
        sample = self.offset + index
        x = torch.tensor([sample % 7, sample % 5, sample % 3, 1.0]) / 4
        return sample, x, x.sum(dim=0, keepdim=True).sin()


@dataclass(frozen=True)
class Config:
    """One configuration of the program. Points are ``(epoch, n)``: in that epoch of the first fit loop,
    after ``n`` batches (train batches of all loaders together, or validation batches)."""

    train_sizes: tuple[int, ...] = (10,)  # one train loader per entry
    batch_size: int = 3
    accumulation: int = 2
    epochs: int = 2
    # "shuffled", "sequential", "seedable" (sampler), "stateful" (use_stateful_dataloader) or "stateful-own" (that,
    # and the train loaders are StatefulDataLoaders: torchdata's own sampler)
    loader: str = "shuffled"
    evaluate: bool = True
    break_train: tuple[int, int] | None = None  # the train loop breaks before the next batch's step
    break_eval: tuple[int, int] | None = None
    raise_train: tuple[int, int] | None = None  # the next batch's step raises (before accumulate)
    register_progress: bool = True  # accelerator.register_for_checkpointing(progress): its saves are committed


@dataclass(frozen=True)
class Stop:
    """Save and stop after train batch ``n`` (0-based, all loaders) of ``epoch``, or after validation batch ``n``."""

    epoch: int
    n: int
    during_eval: bool = False


@dataclass
class Trace:
    """What a run did: per train batch (epoch, loader, ids, step, iteration, end_of_dataloader), per
    validation batch (epoch, ids, a random draw), the final weights, RNG streams and progress state."""

    train: list[tuple[int, int, list[int], int, int, bool]] = field(default_factory=list)
    val: list[tuple[int, list[int], float]] = field(default_factory=list)
    weights: list[torch.Tensor] = field(default_factory=list)
    rng_draws: list[float] = field(default_factory=list)  # torch, random, numpy after the run
    state: dict[str, Any] = field(default_factory=dict)
    disagreements: list[str] = field(default_factory=list)
    anomalies: tuple[str, ...] = ()
    stopped: bool = False


class _Stopped(Exception):
    """The program saved and stops (a kill right after the save)."""


class CutPasses:
    """Per train loader, the passes the program left before their end (registered for checkpointing)."""

    def __init__(self, loaders: int) -> None:
        self.counts = [0] * loaders

    def state_dict(self) -> dict[str, list[int]]:
        return {"counts": list(self.counts)}

    def load_state_dict(self, state: dict[str, list[int]]) -> None:
        self.counts = list(state["counts"])


def fresh_accelerator(config: Config) -> Accelerator:
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    loaders = DataLoaderConfiguration(
        use_seedable_sampler=config.loader == "seedable", use_stateful_dataloader=config.loader.startswith("stateful")
    )
    return Accelerator(cpu=True, gradient_accumulation_steps=config.accumulation, dataloader_config=loaders)


def seed(value: int) -> None:
    torch.manual_seed(value)
    random.seed(value)
    np.random.seed(value)


def run(
    config: Config,
    *,
    tracked: bool = True,
    stop: Stop | None = None,
    directory: str | None = None,
    resume: bool = False,
    seed_value: int = 0,
) -> Trace:
    """Run the program; a resumed run loads ``directory`` first (seed it differently: the checkpoint's RNGs rule)."""
    seed(seed_value)
    accelerator = fresh_accelerator(config)
    torch.manual_seed(0)  # the same initial weights whatever the seed
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    seed(seed_value)
    shuffle = config.loader != "sequential"
    loaders = [
        (StatefulDataLoader if config.loader == "stateful-own" else DataLoader)(
            Offset(size, 1000 * index), batch_size=config.batch_size, shuffle=shuffle
        )
        for index, size in enumerate(config.train_sizes)
    ]
    # Accelerate restores a seedable sampler but not the loader's iteration (its epoch): a resumed shuffled
    # validation loader would repeat pass 0's order (Accelerate's behaviour, docs/accelerate.md, Limits).
    val = DataLoader(Offset(7, 10_000), batch_size=3, shuffle=config.loader not in ("sequential", "seedable"))
    model, optimizer, *prepared = accelerator.prepare(model, optimizer, *loaders, val)
    program = _Program(config, accelerator, model, optimizer, prepared[:-1], prepared[-1], tracked)
    if resume:
        accelerator.load_state(directory)
    try:
        program.fit(stop, directory)
        if config.raise_train is not None:
            program.fit(None, None)
    except _Stopped:
        program.trace.stopped = True
    return program.finish()


def _enumerated(loader: Iterable[Any]) -> Generator[tuple[int, Any], None, None]:
    yield from enumerate(loader)


class _Program:
    def __init__(
        self,
        config: Config,
        accelerator: Accelerator,
        model: Any,
        optimizer: Any,
        loaders: list[Any],
        val: Any,
        tracked: bool,
    ) -> None:
        self.config, self.accelerator, self.model, self.optimizer = config, accelerator, model, optimizer
        self.loaders, self.val = loaders, val
        self.trace = Trace()
        self.cut = CutPasses(len(loaders))
        accelerator.register_for_checkpointing(self.cut)
        self.progress: AcceleratorProgress | None = None
        self.fits = 0
        if tracked:
            self.progress = AcceleratorProgress(accelerator)
            if config.register_progress:
                accelerator.register_for_checkpointing(self.progress)  # after the other registered object
            for index, loader in enumerate(loaders):
                self.progress.track_train_loader(loader, index)

    # loops, with or without the adapter ----------------------------------------------------------------
    def _train_pass(self, index: int) -> Generator[tuple[int, Any], None, None]:
        loader = self.loaders[index]
        return _enumerated(loader) if self.progress is None else self.progress.train(loader, index, with_index=True)

    def _taken(self) -> list[int]:
        if self.progress is None:
            return [0] * len(self.loaders)
        counts = self.progress.view.train.dataloaders
        return [counts[i].batches.epoch if i < len(counts) else 0 for i in range(len(self.loaders))]

    # the program -----------------------------------------------------------------------------------------
    def fit(self, stop: Stop | None, directory: str | None) -> None:
        self.fits += 1
        first = self.fits == 1
        epochs = self.config.epochs
        try:
            with contextlib.nullcontext() if self.progress is None else self.progress.fit(epochs) as run:
                for epoch in range(epochs) if run is None else run.epochs():
                    self._train_epoch(epoch, first, stop, directory)
                    if self.config.evaluate:
                        self._validate(epoch, first, stop, directory)
        except RuntimeError as error:
            if "planned failure" not in str(error):
                raise

    def _next_loader(self, taken: list[int], finished: set[int]) -> int | None:
        shares = [(taken[i] / len(loader), i) for i, loader in enumerate(self.loaders) if i not in finished]
        return min(shares)[1] if shares else None

    def _train_epoch(self, epoch: int, first: bool, stop: Stop | None, directory: str | None) -> None:
        config = self.config
        passes = [self._train_pass(i) for i in range(len(self.loaders))]
        taken = self._taken()
        finished: set[int] = set()
        try:
            while (index := self._next_loader(taken, finished)) is not None:
                try:
                    batch_index, (ids, x, y) = next(passes[index])
                except StopIteration:
                    finished.add(index)
                    continue
                loader = self.loaders[index]
                self._check_train(index, batch_index, taken)
                self.trace.train.append(
                    (epoch, index, ids.tolist(), self.accelerator.step, loader.iteration, loader.end_of_dataloader)
                )
                done = sum(taken)
                if first and config.break_train == (epoch, done):
                    break
                if first and config.raise_train == (epoch, done):
                    raise RuntimeError("planned failure in a train step")
                with self.accelerator.accumulate(self.model):
                    out = self.model(torch.nn.functional.dropout(x, 0.3))
                    self.accelerator.backward(torch.nn.functional.mse_loss(out, y))
                    self.optimizer.step()
                    self.optimizer.zero_grad()
                taken[index] += 1
                if first and stop is not None and not stop.during_eval and (stop.epoch, stop.n) == (epoch, done):
                    self.accelerator.save_state(directory)
                    raise _Stopped
        except _Stopped:
            raise
        except BaseException:
            self._cut_open_passes(passes, finished)
            raise
        self._cut_open_passes(passes, finished)

    def _cut_open_passes(self, passes: list[Generator[Any, None, None]], finished: set[int]) -> None:
        for index, open_pass in enumerate(passes):
            if index not in finished:
                open_pass.close()
                self.cut.counts[index] += 1

    def _validate(self, epoch: int, first: bool, stop: Stop | None, directory: str | None) -> None:
        batches = self.val if self.progress is None else self.progress.evaluate(self.val)
        for index, (ids, x, _y) in enumerate(batches):
            self._check_val(index)
            if first and self.config.break_eval == (epoch, index):
                break
            with torch.no_grad():
                self.model(torch.nn.functional.dropout(x, 0.5))
            self.trace.val.append((epoch, ids.tolist(), torch.rand(1).item()))
            if first and stop is not None and stop.during_eval and (stop.epoch, stop.n) == (epoch, index):
                self.accelerator.save_state(directory)
                raise _Stopped

    # the oracle --------------------------------------------------------------------------------------------
    def _disagree(self, what: str, adapter: object, framework: object) -> None:
        self.trace.disagreements.append(f"{what}: view/adapter {adapter!r}, Accelerate {framework!r}")

    def _check_train(self, index: int, batch_index: int, taken: list[int]) -> None:
        if self.progress is None:
            return
        view = self.progress.view
        loader = self.loaders[index]
        where = f"train epoch {view.epoch_index} loader {index} batch {batch_index}"
        k = self.config.accumulation
        if self.accelerator.step % k != view.train.accumulating_batches:
            self._disagree(f"{where}: accumulating batches", view.train.accumulating_batches, self.accelerator.step)
        if batch_index != taken[index]:
            self._disagree(f"{where}: in-epoch batch index", batch_index, taken[index])
        last = batch_index + 1 == len(loader)
        if loader.end_of_dataloader != last:
            self._disagree(f"{where}: last batch of the pass", last, loader.end_of_dataloader)
        passes = view.train.epochs.lifetime.completed - self.cut.counts[index]
        if loader.iteration != passes:
            self._disagree(f"{where}: passes run to their end", passes, loader.iteration)
        if view.train.batch_index != sum(taken):
            self._disagree(f"{where}: batch index in the epoch", view.train.batch_index, sum(taken))

    def _check_val(self, index: int) -> None:
        if self.progress is None:
            return
        view = self.progress.view
        if view.validate.batch_index != index:
            self._disagree(f"validation batch {index}: batch index", view.validate.batch_index, index)
        last = index + 1 == len(self.val)
        if self.val.end_of_dataloader != last:
            self._disagree(f"validation batch {index}: last batch", last, self.val.end_of_dataloader)

    def finish(self) -> Trace:
        trace = self.trace
        trace.weights = [p.detach().clone() for p in self.model.parameters()]
        trace.rng_draws = [torch.rand(1).item(), random.random(), float(np.random.rand())]
        if self.progress is not None:
            trace.state = without_ledger(self.progress.view.state_dict())  # compared with uninterrupted runs
            trace.anomalies = self.progress.view.anomalies
        return trace
