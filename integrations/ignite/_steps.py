"""The trainer's scheduler and AMP-skipped steps (docs/ignite.md)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from ignite.engine import Engine, Events

from tracker_core import TrainStageProgress
from tracker_core.adapter import count_scheduler_steps, count_skipped_steps


def count_trainer_steps(
    engine: Engine,
    train: TrainStageProgress,
    optimizers: Sequence[torch.optim.Optimizer],
    scaler: torch.amp.GradScaler | None,
    schedulers: Sequence[object],
) -> tuple[Callable[[], None], list[str]]:
    """Count the calls of the param-scheduler handlers among ``schedulers`` and, with a ``scaler``, skips at each
    ITERATION_COMPLETED. Returns what starts counting the torch schedulers and skips, at STARTED (after a load), and
    the names of the handlers on EPOCH_STARTED (Ignite fires it again when it resumes inside an epoch)."""
    torch_schedulers = [s for s in schedulers if isinstance(s, torch.optim.lr_scheduler.LRScheduler)]
    at_epoch_start = []
    for handler in (s for s in schedulers if s not in torch_schedulers):
        events = [event for event in Events if callable(handler) and engine.has_event_handler(handler, event)]
        if not events and callable(handler) and engine.has_event_handler(handler):
            raise ValueError(
                f"the {type(handler).__name__} in schedulers is attached to a custom event of the trainer, whose "
                "firings the handler does not follow: attach it to one of Ignite's Events, or leave it out of "
                "schedulers (its steps are then not counted)"
            )
        if not events:
            raise ValueError(
                f"the {type(handler).__name__} in schedulers is neither a torch LR scheduler nor attached to the "
                "trainer: add the param-scheduler handler to the trainer's events before attach()"
            )
        for event in events:
            engine.add_event_handler(event, lambda _engine: train.scheduler_step())
        if Events.EPOCH_STARTED in events:
            at_epoch_start.append(type(handler).__name__)
    check = [lambda: None]
    if scaler is not None:
        engine.add_event_handler(Events.ITERATION_COMPLETED, lambda _engine: check[0]())

    def start() -> None:
        count_scheduler_steps(train, torch_schedulers)
        if scaler is not None:
            check[0] = count_skipped_steps(train, scaler, optimizers)

    return start, at_epoch_start
