"""A checking handler: compares the ProgressHandler's view with Ignite's own counters at every event.

What it checks (docs/ignite.md, "The record and engine.state"): the fit run is Ignite's
state, so on the trainer ``view.train.batches.run`` equals ``engine.state.iteration`` (less
the batches a ``terminate()`` from ITERATION_STARTED cut before their step) and
``view.train.epochs.run`` follows ``engine.state.epoch``; ``view.global_step`` equals the
optimizer steps taken in this Ignite state, ``view.train.samples.run`` the samples of its
batches; on an evaluator, the stage's in-epoch batches equal the evaluator's ``iteration``
(Ignite resets it every ``run()``) and its epochs the evaluator runs completed. The oracle
counts independently (its own handlers, appended after the adapter's, and its own optimizer
step hooks); every disagreement is recorded with the event and the two values.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from ignite.engine import Engine, Events

from tracker_core.adapter import samples_in
from tracker_core.integrations.ignite import ProgressHandler


class Oracle:
    """Attach after the ProgressHandler (and after ``Checkpoint.load_objects`` when resuming)."""

    def __init__(
        self,
        progress: ProgressHandler,
        trainer: Engine,
        optimizers: Sequence[torch.optim.Optimizer] = (),
        evaluators: dict[str, Engine] | None = None,
    ) -> None:
        self.view = progress.view
        self.trainer = trainer
        self.disagreements: list[str] = []
        self.checks = 0
        train = self.view.train
        # Batches Ignite counted whose step a terminate() at ITERATION_STARTED cut (a loaded run: as saved).
        self._cut = trainer.state.iteration - train.batches.run.completed
        self._steps = train.optimizer_steps.run  # a loaded run's steps so far
        self._samples = train.samples.run
        self._in_epoch = train.batches.epoch.completed if train.epochs.lifetime.in_flight else 0
        self._resumed = train.batches.lifetime.completed > 0
        self._last = ""  # the last per-batch event seen: "started" or "completed"
        for optimizer in optimizers:
            optimizer.register_step_post_hook(self._stepped)
        on = trainer.add_event_handler
        on(Events.STARTED, self._started)
        on(Events.EPOCH_STARTED, self._epoch_started)
        on(Events.ITERATION_STARTED, self._iteration_started)
        on(Events.ITERATION_COMPLETED, self._iteration_completed)
        on(Events.EPOCH_COMPLETED, self._epoch_completed)
        on(Events.TERMINATE, self._terminated)
        on(Events.TERMINATE_SINGLE_EPOCH, self._epoch_terminated)
        on(Events.COMPLETED, self._completed)
        for stage, evaluator in (evaluators or {}).items():
            self._watch_evaluator(stage, evaluator)

    # --- comparisons ----------------------------------------------------------------------
    def _same(self, event: str, what: str, recorded: object, expected: object) -> None:
        self.checks += 1
        if recorded != expected:
            state = self.trainer.state
            self.disagreements.append(
                f"{event} (iteration {state.iteration}, epoch {state.epoch}): {what} recorded {recorded!r}, "
                f"expected {expected!r}"
            )

    def _counts(self, event: str) -> None:
        state, train = self.trainer.state, self.view.train
        self._same(event, "train batches this run", train.batches.run.completed, state.iteration - self._cut)
        self._same(event, "global_step", self.view.global_step, self._steps)
        self._same(event, "train samples this run", train.samples.run, self._samples)
        self._same(event, "fit run in flight", self.view.run.counts.in_flight, True)

    # --- trainer events ---------------------------------------------------------------------
    def _stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        self._steps += 1

    def _started(self) -> None:
        if self.trainer.state.iteration == 0:  # Ignite begins a new state: a new fit run
            self._cut = self._steps = self._samples = 0
        self._counts("STARTED")
        self._same("STARTED", "run kind", self.view.run.kind, "fit")

    def _epoch_started(self) -> None:
        if self._resumed:  # the saved epoch is re-entered where it stopped
            self._resumed = False
        else:
            self._in_epoch = 0
        train, state = self.view.train, self.trainer.state
        self._same("EPOCH_STARTED", "train epochs started this run", train.epochs.run.started, state.epoch)
        self._same("EPOCH_STARTED", "epoch_index", self.view.epoch_index, state.epoch - 1)
        self._counts("EPOCH_STARTED")

    def _iteration_started(self) -> None:
        self._last = "started"
        self._resumed = False
        batches = self.view.train.batches
        self._same("ITERATION_STARTED", "train batch in flight", batches.lifetime.in_flight, True)
        self._same("ITERATION_STARTED", "batch_index", self.view.batch_index, self._in_epoch)

    def _iteration_completed(self) -> None:
        self._last = "completed"
        self._in_epoch += 1
        self._samples += samples_in(self.trainer.state.batch)
        train, state = self.view.train, self.trainer.state
        self._same("ITERATION_COMPLETED", "train batches this epoch", train.batches.epoch.completed, self._in_epoch)
        self._same("ITERATION_COMPLETED", "epoch_index", self.view.epoch_index, state.epoch - 1)
        self._counts("ITERATION_COMPLETED")

    def _epoch_completed(self) -> None:
        self._resumed = False  # a resume at an epoch's last batch completes that epoch first
        if self._last == "started":  # an EXCEPTION_RAISED handler swallowed the step's exception
            self._last = "completed"
            self._in_epoch += 1
            self._samples += samples_in(self.trainer.state.batch)
        train, state = self.view.train, self.trainer.state
        self._same("EPOCH_COMPLETED", "train epochs completed this run", train.epochs.run.completed, state.epoch)
        self._counts("EPOCH_COMPLETED")

    def _terminated(self) -> None:
        self._cut_at_iteration_started()
        self._counts("TERMINATE")

    def _epoch_terminated(self, iter_counter: int = 0) -> None:
        self._cut_at_iteration_started()
        self._counts("TERMINATE_SINGLE_EPOCH")

    def _cut_at_iteration_started(self) -> None:
        if self._last == "started":
            self._last = "completed"
            self._cut += 1

    def _completed(self) -> None:
        state, view = self.trainer.state, self.view
        self._same("COMPLETED", "train batches this run", view.train.batches.run.completed, state.iteration - self._cut)
        self._same("COMPLETED", "global_step", view.global_step, self._steps)
        self._same("COMPLETED", "fit run ended", view.run.counts.processed == view.run.counts.ready, True)

    def run_cut_by_exception(self) -> None:
        """The caller saw an exception leave ``run()``: a step that raised is counted as Ignite counts it."""
        if self._last == "started":
            self._last = "completed"
            self._samples += samples_in(self.trainer.state.batch)

    # --- evaluators --------------------------------------------------------------------------
    def _watch_evaluator(self, name: str, evaluator: Engine) -> None:
        runs = [self.view.stage(name).epochs.lifetime.completed]  # one epoch per run(); a cut one is closed too

        def started() -> None:
            runs[0] += 1

        def iteration_completed() -> None:
            recorded = self.view.stage(name).batches.epoch.completed
            self._same(f"{name} ITERATION_COMPLETED", f"{name} batches this epoch", recorded, evaluator.state.iteration)

        def completed() -> None:
            recorded = self.view.stage(name).epochs.lifetime.completed
            self._same(f"{name} COMPLETED", f"{name} epochs", recorded, runs[0])

        evaluator.add_event_handler(Events.STARTED, started)
        evaluator.add_event_handler(Events.ITERATION_COMPLETED, iteration_completed)
        evaluator.add_event_handler(Events.COMPLETED, completed)
