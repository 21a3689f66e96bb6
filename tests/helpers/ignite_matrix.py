"""Generated Ignite configurations for the oracle matrix (tests/test_ignite_matrix.py); no tests here.

A :class:`Case` says how a training program is built (optimizers, accumulation, shuffling,
an evaluator), how Ignite is told to stop (``max_epochs`` or ``max_iters``, ``epoch_length``),
what happens during the run (``terminate``, ``terminate_epoch``, ``interrupt`` or a step that
raises, at an iteration, each followed by ``run()`` again while Ignite's state is not done) and
where a checkpoint is taken for a resume. :func:`play` runs it with the oracle attached;
:func:`resume` loads the checkpoint into fresh objects and plays the rest. A case that resumes trains from a
StatefulDataLoader (exact at every batch), unless played ``plain``; the others from a plain DataLoader.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from ignite.engine import Engine, Events, create_supervised_evaluator, create_supervised_trainer
from ignite.handlers import Checkpoint, DiskSaver
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core.integrations.ignite import ProgressHandler

from helpers.ignite_oracle import Oracle
from helpers.ignite_program import Indexed

TRAIN_SIZE = 11  # batch 3: 4 batches per epoch, the last of 2 samples
BATCH = 3
PER_EPOCH = 4
EVENTS = (
    "none",
    "terminate",
    "terminate_epoch",
    "interrupt",
    "swallowed_exception",
    "unhandled_exception",
    "terminate_at_started",
    "run_again",  # run() again once Ignite is done: a new Ignite state
    "more_epochs",  # run(max_epochs + 1) once Ignite is done: Ignite continues its state
)


class Boom(RuntimeError):
    """The exception a step of the ``swallowed_exception`` or ``unhandled_exception`` event raises."""


@dataclass(frozen=True)
class Case:
    index: int
    optimizer: str  # "sgd", "adam" or "two" (a custom update function stepping two optimizers)
    accumulation: int
    shuffle: bool
    evaluator: bool
    max_epochs: int | None
    max_iters: int | None
    epoch_length: int | None
    event: str
    event_at: int
    save_at: int | None  # the iteration after which a checkpoint is resumed, or None

    @property
    def name(self) -> str:
        stop = f"epochs{self.max_epochs}" if self.max_iters is None else f"iters{self.max_iters}"
        parts = [f"{self.index}", self.optimizer, f"acc{self.accumulation}", stop, f"{self.event}@{self.event_at}"]
        parts += ["shuffle"] * self.shuffle + ["eval"] * self.evaluator
        parts += [f"len{self.epoch_length}"] * (self.epoch_length is not None)
        parts += [f"save@{self.save_at}"] * (self.save_at is not None)
        return "-".join(parts)


def cases(count: int) -> list[Case]:
    """``count`` configurations drawn from a fixed seed (the same list every time)."""
    draw = random.Random(20261203)
    made = []
    for index in range(count):
        optimizer = draw.choice(("sgd", "adam", "two"))
        accumulation = 1 if optimizer == "two" else draw.choice((1, 2, 3))
        by_iters = draw.random() < 0.3
        epoch_length = draw.choice((None, None, None, 3))
        event = draw.choice(EVENTS)
        by_iters = by_iters and event != "more_epochs"
        if event == "terminate_at_started":
            # A window's first step cut before it zeroed the gradients: Ignite's next step adds to those
            # of the last window, which a checkpoint taken before does not hold (docs/ignite.md, Limits).
            accumulation = 1
        max_epochs = None if by_iters else draw.choice((1, 2, 3))
        max_iters = draw.choice((5, 7, 9)) if by_iters else None
        total = max_iters if max_iters is not None else (epoch_length or PER_EPOCH) * (max_epochs or 1)
        event_at = draw.randint(1, max(1, total - 1))
        # Exactness is checked where it is promised: a DataLoader-length epoch, and no save after a
        # swallowed exception (Ignite then carries the cut epoch's iterator into the next epoch);
        # after an unhandled one nothing is saved (the run ends there).
        resumable = epoch_length is None and event != "swallowed_exception"
        save_at = draw.randint(1, max(1, total - 1)) if resumable and draw.random() < 0.6 else None
        if save_at == event_at and event.startswith("terminate"):
            # Saved as the stop is asked: the resume continues the epoch, run() again starts the next one.
            save_at = None
        made.append(
            Case(
                index,
                optimizer,
                accumulation,
                draw.random() < 0.5,
                draw.random() < 0.5,
                max_epochs,
                max_iters,
                epoch_length,
                event,
                event_at,
                save_at,
            )
        )
    return made


@dataclass
class Played:
    """One process's objects and what it saw."""

    model: torch.nn.Module
    optimizers: list[torch.optim.Optimizer]
    trainer: Engine
    evaluator: Engine | None
    progress: ProgressHandler
    loader: DataLoader[Any]
    oracle: Oracle | None = None
    seen: list[list[int]] = field(default_factory=list)
    seen_at_save: int = 0
    epoch_batches_at_save: int = 0  # the batches of the epoch in flight when saved (0 between epochs)
    swallowed: list[BaseException] = field(default_factory=list)

    def to_save(self) -> dict[str, Any]:
        saved: dict[str, Any] = {"trainer": self.trainer, "model": self.model, "progress": self.progress}
        saved.update({f"optimizer{i}": optimizer for i, optimizer in enumerate(self.optimizers)})
        return saved

    def weights(self) -> dict[str, torch.Tensor]:
        return {name: value.clone() for name, value in self.model.state_dict().items()}


def _build(case: Case, seed: int, plain: bool) -> Played:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.Dropout(0.3), torch.nn.Linear(6, 1))
    seen: list[list[int]] = []
    loss = torch.nn.MSELoss()

    def prepare(batch: Any, device: Any = None, non_blocking: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        if model.training:
            seen.append(batch[2].tolist())
        return batch[0], batch[1]

    raised = [False]

    def maybe_raise(engine: Engine) -> None:
        raising = case.event in ("swallowed_exception", "unhandled_exception")
        if raising and engine.state.iteration == case.event_at and not raised[0]:
            raised[0] = True
            raise Boom(f"step {case.event_at}")

    optimizers: list[torch.optim.Optimizer]
    if case.optimizer == "two":
        first = torch.optim.SGD(model[0].parameters(), lr=0.05, momentum=0.9)
        second = torch.optim.Adam(model[2].parameters(), lr=0.01)
        optimizers = [first, second]

        def update(engine: Engine, batch: Any) -> float:
            maybe_raise(engine)
            model.train()
            x, y = prepare(batch)
            value = loss(model(x), y)
            value.backward()
            first.step()
            first.zero_grad()
            if engine.state.iteration % 2 == 0:
                second.step()
                second.zero_grad()
            return float(value.item())

        trainer = Engine(update)
    else:
        optimizer: torch.optim.Optimizer
        if case.optimizer == "sgd":
            optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        else:
            optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
        optimizers = [optimizer]
        supervised = create_supervised_trainer(
            model, optimizer, loss, prepare_batch=prepare, gradient_accumulation_steps=case.accumulation
        )
        step = supervised._process_function

        def checked_step(engine: Engine, batch: Any) -> Any:
            maybe_raise(engine)
            return step(engine, batch)

        trainer = Engine(checked_step)
    progress = ProgressHandler()
    progress.attach(trainer, optimizers=optimizers)
    evaluator = None
    if case.evaluator:
        evaluator = create_supervised_evaluator(model, prepare_batch=prepare)
        progress.attach(evaluator, stage="validate")
        val_loader = DataLoader(Indexed(5, seed=1), batch_size=2)
        trainer.add_event_handler(Events.EPOCH_COMPLETED, lambda: evaluator.run(val_loader))
    # A case that resumes is proven exact with a StatefulDataLoader (built before any load: a shuffling one draws the
    # global RNG); a plain DataLoader is positioned by nothing, so its mid-epoch resume follows Ignite's own rule.
    kind = DataLoader if plain or case.save_at is None else StatefulDataLoader
    loader = kind(Indexed(TRAIN_SIZE), batch_size=BATCH, shuffle=case.shuffle)
    played = Played(model, optimizers, trainer, evaluator, progress, loader, seen=seen)
    if case.event == "swallowed_exception":
        trainer.add_event_handler(Events.EXCEPTION_RAISED, lambda engine, error: played.swallowed.append(error))
    return played


def _inject(case: Case, played: Played, from_iteration: int) -> None:
    """The case's event, at its iteration, if that is still ahead."""
    trainer = played.trainer
    if case.event_at <= from_iteration or case.event not in _ACTS:
        return
    event = Events.ITERATION_STARTED if case.event == "terminate_at_started" else Events.ITERATION_COMPLETED
    act = getattr(trainer, _ACTS[case.event])
    trainer.add_event_handler(event(once=case.event_at), lambda: act())  # no engine argument: skip_completed


_ACTS = {
    "terminate": "terminate",
    "terminate_epoch": "terminate_epoch",
    "interrupt": "interrupt",
    "terminate_at_started": "terminate",
}  # Ignite's filter counts its iteration


def _drive(case: Case, played: Played, first: bool) -> None:
    """``run()`` as the case says, ``run()`` again while Ignite's state is not done (at most 5 times),
    then the case's ``run_again`` or ``more_epochs``. A Boom leaving ``run()`` ends it (Ignite 0.5.5
    cannot continue that run)."""
    trainer = played.trainer
    try:
        if first:
            stop = {"max_epochs": case.max_epochs} if case.max_iters is None else {"max_iters": case.max_iters}
            trainer.run(played.loader, epoch_length=case.epoch_length, **stop)
        else:
            trainer.run(played.loader)
        for _ in range(5):
            interrupted = trainer._internal_run_generator is not None
            if Engine._is_done(trainer.state) and not interrupted:
                break
            trainer.run(played.loader)
    except Boom:
        assert played.oracle is not None
        played.oracle.run_cut_by_exception()
        return
    if case.event == "run_again":
        trainer.run(played.loader)
    elif case.event == "more_epochs" and case.max_epochs is not None:
        trainer.run(played.loader, max_epochs=case.max_epochs + 1)


def play(case: Case, folder: Path, plain: bool = False) -> Played:
    """The uninterrupted run (with the case's events), checked by the oracle; saves at ``case.save_at``. ``plain``: a
    plain DataLoader even where the case resumes."""
    played = _build(case, seed=0, plain=plain)
    played.oracle = Oracle(
        played.progress, played.trainer, played.optimizers, {"validate": played.evaluator} if played.evaluator else None
    )
    _inject(case, played, 0)
    if case.save_at is not None:
        checkpoint = Checkpoint(
            played.to_save(), DiskSaver(str(folder), require_empty=False), filename_pattern="{name}.pt"
        )

        def save() -> None:
            if not played.seen_at_save:  # once: a later Ignite state (run_again) counts iterations anew
                played.seen_at_save = len(played.seen)
                train = played.progress.view.train
                played.epoch_batches_at_save = train.batches.epoch.completed if train.epochs.lifetime.in_flight else 0
                checkpoint(played.trainer)

        played.trainer.add_event_handler(Events.ITERATION_COMPLETED(once=case.save_at), save)
    _drive(case, played, first=True)
    return played


def resume(case: Case, folder: Path, plain: bool = False) -> Played:
    """Fresh objects loaded from the checkpoint, then the rest of the run, checked by the oracle."""
    played = _build(case, seed=1234, plain=plain)
    Checkpoint.load_objects(played.to_save(), str(folder / "checkpoint.pt"))
    played.oracle = Oracle(
        played.progress, played.trainer, played.optimizers, {"validate": played.evaluator} if played.evaluator else None
    )
    _inject(case, played, played.trainer.state.iteration)
    _drive(case, played, first=False)
    return played
