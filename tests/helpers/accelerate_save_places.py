"""Accelerate programs that save in places a loop reaches only by leaving or nesting its passes: inside a validation
nested in the train pass's body, and after the ``with progress.fit(n)`` block was left in the middle of an epoch.

Each trains Linear(4, 1) with input dropout (so the global RNG matters) on ``Indexed(8)`` in batches of 2 for 3 epochs,
saves and stops where it is told, or starts by loading a checkpoint; ``resumed_exactly`` compares a stopped and resumed
pair with the uninterrupted run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core.integrations.accelerate import AcceleratorProgress

from helpers.accelerate_drive import Indexed, Result, Setup, fresh_accelerator, seed
from helpers.ledger import without_ledger

Finished = TypeVar("Finished", bound=Result)
# Validation batches: a list, which draws no RNG when iterated (only the model's dropout does).
VALIDATION = [(torch.arange(2), torch.linspace(-1, 1, 8).reshape(2, 4)) for _ in range(3)]


@dataclass
class Validated(Result):
    """The run's result, and whether an ``evaluate()`` moved the global RNG before its first batch (it must not)."""

    evaluations_moving_rng: list[int] = field(default_factory=list)


def _prepared(stateful: bool) -> tuple[Accelerator, torch.nn.Module, torch.optim.Optimizer, Any, AcceleratorProgress]:
    accelerator = fresh_accelerator(Setup(accumulation=1, stateful=stateful))
    seed(0)
    model = torch.nn.Linear(4, 1)
    kind = StatefulDataLoader if stateful else DataLoader
    loader = kind(Indexed(8), batch_size=2, shuffle=True)
    model, optimizer, loader = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1), loader)
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    progress.track_train_loader(loader)
    return accelerator, model, optimizer, loader, progress


def _step(
    accelerator: Accelerator, model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: list[torch.Tensor]
) -> None:
    _ids, x, y = batch
    loss = torch.nn.functional.mse_loss(model(torch.nn.functional.dropout(x, 0.3)), y)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()


def validating(
    where: Literal["nested", "after-break"], *, save_dir: str | None = None, load_dir: str | None = None
) -> Validated:
    """Validate with dropout ``nested`` in the train pass's body after every second batch, or ``after-break`` in the
    epoch body after breaking out of the pass after the second batch of epoch 0; with ``save_dir``, save at the second
    batch of the first validation and stop."""
    accelerator, model, optimizer, loader, progress = _prepared(stateful=True)
    if load_dir is not None:
        accelerator.load_state(load_dir)
    result = Validated(weights=[])
    evaluations = 0

    def validate() -> bool:
        nonlocal evaluations
        evaluations += 1
        before = torch.get_rng_state()
        for index, (_ids, x) in enumerate(progress.evaluate(VALIDATION)):
            if index == 0 and not torch.equal(torch.get_rng_state(), before):
                result.evaluations_moving_rng.append(evaluations)
            with torch.no_grad():
                model(torch.nn.functional.dropout(x, 0.3))
            if save_dir is not None and index == 1:
                accelerator.save_state(save_dir)
                return True
        return False

    with progress.fit(3) as fit:
        for epoch in fit.epochs():
            for index, batch in fit.train(loader, with_index=True):
                result.train_ids.append(batch[0].tolist())
                _step(accelerator, model, optimizer, batch)
                if where == "nested" and index % 2 == 1 and validate():
                    return _finish(result, model, progress)
                if where == "after-break" and epoch == 0 and index == 1:
                    break
            if where == "after-break" and epoch == 0 and validate():
                return _finish(result, model, progress)
    return _finish(result, model, progress)


def leaving_the_fit(
    how: Literal["interrupt", "break"],
    *,
    stateful: bool = True,
    stop_after: int | None = None,
    save_dir: str | None = None,
    load_dir: str | None = None,
) -> Result:
    """A fit of 3 epochs; after the train batch numbered ``stop_after`` (from 0, over the run) it is left by a
    ``KeyboardInterrupt`` out of the ``with`` block (``interrupt``) or a ``break`` out of both loops, and saves to
    ``save_dir`` after the block."""
    accelerator, model, optimizer, loader, progress = _prepared(stateful)
    if load_dir is not None:
        accelerator.load_state(load_dir)
    result = Result(weights=[])
    stop = False
    try:
        with progress.fit(3) as fit:
            for _epoch in fit.epochs():
                for batch in fit.train(loader):
                    result.train_ids.append(batch[0].tolist())
                    _step(accelerator, model, optimizer, batch)
                    stop = len(result.train_ids) - 1 == stop_after
                    if stop and how == "interrupt":
                        raise KeyboardInterrupt
                    if stop:
                        break
                if stop:
                    break
    except KeyboardInterrupt:
        stop = True
    if stop:
        accelerator.save_state(save_dir)
    return _finish(result, model, progress)


def _finish(result: Finished, model: torch.nn.Module, progress: AcceleratorProgress) -> Finished:
    result.weights = [p.detach().clone() for p in model.parameters()]
    result.state = without_ledger(progress._tracker.state_dict()["progress"])
    return result


def resumed_exactly(reference: Result, stopped: Result, resumed: Result) -> bool:
    """The stopped and resumed runs together trained what the uninterrupted ``reference`` did, to the same weights and
    progress."""
    return (
        stopped.train_ids + resumed.train_ids == reference.train_ids
        and all(torch.equal(a, b) for a, b in zip(resumed.weights, reference.weights, strict=True))
        and resumed.state == reference.state
    )
