"""The evaluation epochs (validate, test, predict) of an AcceleratorProgress: one open at a time."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from tracker_core import InexactResumeWarning, Progress, StageProgress
from tracker_core.adapter import GlobalRng, ResumeRngCheck, TokenCounter, samples_in
from tracker_core.integrations.accelerate._fit import Batch
from tracker_core.integrations.accelerate._passes import TORCH_SHUFFLERS, index_sampler, start_from_the_beginning

_NOT_RERUN = (
    "the resumed loop goes on with the next train batch, so that evaluation is not rerun (its remaining batches, "
    "their random draws and its counts are left out); save after the evaluation ends instead"
)


@dataclass(slots=True)
class Evaluation:
    """The open evaluation pass (one epoch of ``stage``)."""

    stage: StageProgress
    loader: int  # dataloader index
    own_run: bool  # a validate/test/predict run of its own, outside epochs()
    rng: GlobalRng  # the global RNGs when it began
    restart: str | None  # why a restart of it from a save inside it is inexact; None: exact
    samples: int = -1  # of the batch in the loop body; -1: none
    batch: Any = None  # the batch in the loop body (its tokens are counted when it ends)


class EvaluationPasses:
    """Counts each evaluation epoch's batches and ends the open one when its loop is left or another loop begins."""

    def __init__(self, progress: Progress, tokens: dict[str, TokenCounter], rng_check: ResumeRngCheck) -> None:
        self._progress = progress
        self._tokens = tokens
        self._rng_check = rng_check
        self.open: Evaluation | None = None  # the open evaluation pass
        self.restored_rng: tuple[str, GlobalRng] | None = None  # load_state's: the RNGs a saved evaluation began with

    def run(
        self, stage: StageProgress, loader: Iterable[Batch], index: int, begin_run: Callable[[str], bool]
    ) -> Generator[Batch, None, None]:
        """One evaluation epoch; ``begin_run(kind)`` begins a run of its own outside a fit (False inside one). It
        touches no RNG; its RNGs at the start are saved, so one saved mid-way restarts drawing what it drew."""
        self.end_left_open()
        self._rng_check.forget()  # an evaluation before any train pass after a load: its draws are not compared
        restored, self.restored_rng = self.restored_rng, None
        if restored is not None and restored[0] == stage.name:
            restored[1].apply()  # after load_state, whose own RNG file holds the save instant's RNGs
        own_run = begin_run(stage.name)
        first_pass = self._progress.view.stage(stage.name).epochs.lifetime.completed == 0
        why = _inexact_restart(loader, first_pass)
        if start_from_the_beginning(loader) and why is not None and (restored is not None or first_pass):
            warnings.warn(
                f"{stage.name} dataloader {index} is a StatefulDataLoader that Accelerate's load_state restored "
                f"before this pass, which begins from its first batch: {why}",
                InexactResumeWarning,
                stacklevel=3,
            )
        evaluation = self.open = Evaluation(stage, index, own_run, GlobalRng.capture(), why)
        stage.epoch_ready()
        stage.epoch_started()
        try:
            for batch in loader:
                if self.open is evaluation:
                    stage.batch_begin()
                    evaluation.samples = samples_in(batch)
                    evaluation.batch = batch
                yield batch
                if self.open is evaluation:
                    self._end_batch(evaluation)
        except GeneratorExit:  # the loop body left: the epoch was cut short
            self._end(evaluation)
            raise
        self._end(evaluation)

    def saved_rng(self, train_loader: int | None) -> tuple[str, GlobalRng] | None:
        """What ``save_state`` keeps of the open evaluation, its stage and starting RNGs (None if it is nested in the
        loop body of a batch of train dataloader ``train_loader``: not rerun); warns as its resume will."""
        evaluation = self.open
        if evaluation is not None and train_loader is not None:
            warnings.warn(
                f"save_state inside the pass of {evaluation.stage.name} dataloader {evaluation.loader}, nested in the "
                f"loop body of train dataloader {train_loader}'s pass: {_NOT_RERUN}",
                InexactResumeWarning,
                stacklevel=4,
            )
            return None
        if evaluation is not None and evaluation.restart is not None:
            warnings.warn(
                f"save_state inside the pass of {evaluation.stage.name} dataloader {evaluation.loader}, a "
                f"StatefulDataLoader whose state Accelerate saves: the resumed pass restarts, {evaluation.restart}",
                InexactResumeWarning,
                stacklevel=4,
            )
        return None if evaluation is None else (evaluation.stage.name, evaluation.rng)

    def restore(self, saved_rng: tuple[str, GlobalRng] | None, entry: Mapping[str, Any]) -> None:
        """At ``load_state`` of the tracker ``entry``: the RNGs to put back at the next evaluation if it reruns the
        one saved mid-way (``saved_rng``); warns if an evaluation nested in a train pass was (none saved)."""
        self.restored_rng = saved_rng
        stages = entry["progress"]["stages"]
        for name in ("validate", "test", "predict"):
            epochs = stages[name]["epochs"]["lifetime"]
            if saved_rng is None and epochs["ready"] != epochs["completed"]:
                warnings.warn(
                    f"load_state of a checkpoint saved inside a {name} pass nested in the loop body of a train pass: "
                    + _NOT_RERUN,
                    InexactResumeWarning,
                    stacklevel=4,
                )

    def end_left_open(self) -> None:
        """End a pass left suspended (e.g. by an exception's traceback), as a break would."""
        self._end(self.open)

    def _end_batch(self, evaluation: Evaluation) -> None:
        evaluation.stage.batch_end(evaluation.samples, evaluation.loader)
        self._tokens[evaluation.stage.name](evaluation.batch)
        evaluation.samples, evaluation.batch = -1, None

    def _end(self, evaluation: Evaluation | None) -> None:
        """End ``evaluation`` if it is the open one."""
        if evaluation is None or evaluation is not self.open:
            return
        self.open = None
        if evaluation.samples >= 0:
            self._end_batch(evaluation)
        evaluation.stage.epoch_processed()
        evaluation.stage.epoch_completed()
        if evaluation.own_run:
            self._progress.run_processed()
            self._progress.run_completed()


def _inexact_restart(loader: object, first_pass: bool) -> str | None:
    """Why an evaluation pass of a prepared ``loader`` begun again from its first batch after a load differs from the
    saving run's, or None: only a StatefulDataLoader's (use_stateful_dataloader) in its stage's first pass, or over
    torch's sampler with a generator of its own, does."""
    if not getattr(loader, "use_stateful_dataloader", False):
        return None
    if first_pass:
        return (
            "and its new iterator draws the global RNG where the saving run's first pass read the one prepare() built"
        )
    sampler = index_sampler(loader)
    if isinstance(sampler, TORCH_SHUFFLERS) and isinstance(getattr(sampler, "generator", None), torch.Generator):
        return (
            f"and its {type(sampler).__name__} draws its order from its generator as the save left it, not as the "
            "pass began"
        )
    return None
