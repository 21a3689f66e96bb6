"""Drive a Progress through scripted event sequences, and resume one as a real framework would.

A *script* is the uninterrupted sequence of steps a training loop performs. Each
step is one phase mark of one event (a run, an epoch or a batch) or one tally
(a scheduler step). The optimizer steps taken while a train batch is processed
belong to that batch's ``processed`` step: they happen inside the training step,
and a checkpoint (which also holds the weights and optimizer state) is never taken
in the middle of it. A *cut* ``c`` is a checkpoint taken after ``steps[:c]``.

The framework contract on resume (what :func:`resume_steps` replays), derived from
``Progress.load_state_dict`` and ``_settle_in_flight``:

1. A run that was in flight and not yet processed is *re-entered*: the framework
   calls ``run_ready(kind)`` and ``run_started()`` again (the tracker counts
   nothing) and skips the script's own ready/started marks of that run that lie
   after the cut.
2. A train epoch that was in flight and not yet processed is re-entered the same
   way with ``epoch_ready()``/``epoch_started()``; its batches continue where they
   stopped (the data loader resumes after the last processed batch).
3. A batch that was ready or started, but not processed, is undone by the load:
   its data is fetched again, so replay restarts at that batch's ``ready`` step.
4. An evaluation (validate/test/predict) epoch that was in flight and not yet
   processed is dropped by the load: it runs again whole, so replay restarts at
   that epoch's ``ready`` step.
5. An event that was processed but not completed counts as completed: its end
   hooks are not run again, so its ``completed`` step is skipped.

Nothing else is replayed differently: every later step runs as in the script.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tracker_core import Progress, Tracker
from tracker_core.state._schema import parse

PHASES = ("ready", "started", "processed", "completed")
EVAL_STAGES = ("validate", "test", "predict")
STAGE_NAMES = ("train", *EVAL_STAGES)


# steps ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Call:
    """One call on the owner's API: ``target`` is "" for the Progress, else a stage name."""

    target: str
    method: str
    args: tuple[Any, ...] = ()

    def __call__(self, progress: Progress) -> None:
        owner: Any = progress if not self.target else progress.stage(self.target)
        getattr(owner, self.method)(*self.args)

    def __str__(self) -> str:
        owner = f"{self.target}." if self.target else ""
        return f"{owner}{self.method}({', '.join(map(repr, self.args))})"


@dataclass(frozen=True)
class Step:
    """Calls made atomically (no checkpoint between them); ``frame``/``phase`` say which mark it is."""

    calls: tuple[Call, ...]
    frame: int | None = None
    phase: str | None = None

    @property
    def label(self) -> str:
        return "+".join(str(c) for c in self.calls)


@dataclass
class Frame:
    """One event of the script: which step marks each of its phases."""

    kind: str  # "run", "epoch" or "batch"
    stage: str  # "" for a run
    run_kind: str = ""
    steps: dict[str, int] = field(default_factory=dict)  # phase -> step index

    @property
    def end(self) -> int:
        """The step that finishes the event (``completed``, or ``cancelled`` for a cancelled batch)."""
        return self.steps.get("completed", self.steps.get("cancelled", -1))

    def open_at(self, cut: int) -> bool:
        return self.steps["ready"] < cut <= self.end

    def reached(self, cut: int) -> str:
        """The last phase marked before ``cut``."""
        return max((i, p) for p, i in self.steps.items() if i < cut)[1]


@dataclass
class Script:
    steps: list[Step] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.steps)


class ScriptBuilder:
    """Build a :class:`Script` the way a loop nests its events."""

    def __init__(self) -> None:
        self.script = Script()

    def _frame(self, kind: str, stage: str, run_kind: str = "") -> int:
        self.script.frames.append(Frame(kind, stage, run_kind))
        return len(self.script.frames) - 1

    def _mark(self, frame: int, phase: str, *calls: Call) -> None:
        self.script.frames[frame].steps[phase] = len(self.script.steps)
        self.script.steps.append(Step(tuple(calls), frame, phase))

    def tally(self, *calls: Call) -> None:
        """Steps that mark no phase (scheduler steps); placed only between events."""
        self.script.steps.append(Step(tuple(calls)))

    @contextmanager
    def run(self, kind: str) -> Iterator[None]:
        f = self._frame("run", "", kind)
        self._mark(f, "ready", Call("", "run_ready", (kind,)))
        self._mark(f, "started", Call("", "run_started"))
        yield
        self._mark(f, "processed", Call("", "run_processed"))
        self._mark(f, "completed", Call("", "run_completed"))

    @contextmanager
    def epoch(self, stage: str) -> Iterator[None]:
        f = self._frame("epoch", stage)
        self._mark(f, "ready", Call(stage, "epoch_ready"))
        self._mark(f, "started", Call(stage, "epoch_started"))
        yield
        self._mark(f, "processed", Call(stage, "epoch_processed"))
        self._mark(f, "completed", Call(stage, "epoch_completed"))

    def batch(
        self,
        stage: str,
        samples: int,
        dataloader: int = 0,
        optimizers: Sequence[int] = (),
        skipped: Sequence[int] = (),
    ) -> None:
        """A batch; ``optimizers`` step and ``skipped`` skip a step while it is processed."""
        f = self._frame("batch", stage)
        self._mark(f, "ready", Call(stage, "batch_ready"))
        self._mark(f, "started", Call(stage, "batch_started"))
        steps = [Call(stage, "optimizer_step", (i,)) for i in optimizers]
        steps += [Call(stage, "optimizer_step_skipped", (i,)) for i in skipped]
        self._mark(f, "processed", *steps, Call(stage, "batch_processed", (samples, dataloader)))
        self._mark(f, "completed", Call(stage, "batch_completed"))

    def cancelled_batch(self, stage: str) -> None:
        """A batch fetched and started, then cancelled (e.g. a start hook asked to stop)."""
        f = self._frame("batch", stage)
        self._mark(f, "ready", Call(stage, "batch_ready"))
        self._mark(f, "started", Call(stage, "batch_started"))
        self._mark(f, "cancelled", Call(stage, "cancel_batch"))

    # whole loops ----------------------------------------------------------------
    def eval_epoch(self, stage: str, batches: int, dataloaders: int = 1, samples: int = 4) -> None:
        with self.epoch(stage):
            for j in range(batches):
                self.batch(stage, samples, dataloader=j % dataloaders)

    def fit(
        self,
        epochs: int = 3,
        batches: int = 4,
        accumulate: int = 3,
        val_every: int = 2,
        val_batches: int = 2,
        val_dataloaders: int = 2,
        train_dataloaders: int = 1,
        optimizers: int = 1,
        skip_every: int = 0,
        samples: int = 8,
        last_samples: int = 5,
        scheduler: str = "step",
        stop_at: tuple[int, int] | None = None,
    ) -> None:
        """One fit run.

        Every ``accumulate`` train batches (counted over the whole run, so windows
        straddle epochs) each of ``optimizers`` optimizers steps; with ``skip_every``
        every such window number that divides by it has the last optimizer skip its
        step instead (AMP overflow). A validation epoch of ``val_batches`` batches
        runs after every ``val_every`` train batches. The last batch of an epoch has
        ``last_samples`` samples. ``scheduler`` is "step" (after each optimizer
        window's batch completes), "epoch" (after each train epoch completes) or "".
        ``stop_at=(epoch, batch)`` cancels that batch and ends the run there.
        """
        processed = 0
        windows = 0
        with self.run("fit"):
            for e in range(epochs):
                stopped = False
                with self.epoch("train"):
                    for i in range(batches):
                        if stop_at == (e, i):
                            self.cancelled_batch("train")
                            stopped = True
                            break
                        processed += 1
                        stepping = processed % accumulate == 0
                        taken: list[int] = []
                        skipped: list[int] = []
                        if stepping:
                            windows += 1
                            taken = list(range(optimizers))
                            if skip_every and windows % skip_every == 0:
                                skipped = [taken.pop()]
                        self.batch(
                            "train",
                            last_samples if i == batches - 1 else samples,
                            dataloader=i % train_dataloaders,
                            optimizers=taken,
                            skipped=skipped,
                        )
                        if stepping and scheduler == "step":
                            self.tally(Call("train", "scheduler_step"))
                        if val_every and (i + 1) % val_every == 0:
                            self.eval_epoch("validate", val_batches, val_dataloaders)
                if scheduler == "epoch":
                    self.tally(Call("train", "scheduler_step"))
                if stopped:
                    break

    def eval_run(self, kind: str, epochs: int = 1, batches: int = 3, dataloaders: int = 1) -> None:
        """A validate/test/predict run."""
        with self.run(kind):
            for _ in range(epochs):
                self.eval_epoch(kind, batches, dataloaders)


def fit_script(**options: Any) -> Script:
    """The script of one fit run; see :meth:`ScriptBuilder.fit` for the options."""
    builder = ScriptBuilder()
    builder.fit(**options)
    return builder.script


# driving and resuming ------------------------------------------------------------
def drive(progress: Progress, steps: Sequence[Step]) -> Progress:
    for step in steps:
        for call in step.calls:
            call(progress)
    return progress


def driven(script: Script, cut: int | None = None) -> Progress:
    """A fresh Progress driven through the first ``cut`` steps (all of them by default)."""
    return drive(Progress(), script.steps[: len(script) if cut is None else cut])


def states_along(script: Script) -> list[dict[str, Any]]:
    """The state_dict at every cut, ``0`` to ``len(script)``, from one drive."""
    progress = Progress()
    states = [progress.state_dict()]
    for step in script.steps:
        drive(progress, [step])
        states.append(progress.state_dict())
    return states


def open_frames(script: Script, cut: int) -> list[Frame]:
    """The events in flight at the cut, outermost first."""
    frames = [f for f in script.frames if f.open_at(cut)]
    return sorted(frames, key=lambda f: f.steps["ready"])


def _reentry(frame: Frame) -> list[Step]:
    if frame.kind == "run":
        return [Step((Call("", "run_ready", (frame.run_kind,)),)), Step((Call("", "run_started"),))]
    return [Step((Call(frame.stage, "epoch_ready"),)), Step((Call(frame.stage, "epoch_started"),))]


def resume_steps(script: Script, cut: int) -> list[Step]:
    """What a framework does after restoring the checkpoint taken at ``cut`` (see the module doc)."""
    replay: list[Step] = []
    skip: set[int] = set()
    start = cut
    for frame in open_frames(script, cut):
        reached = frame.reached(cut)
        if reached == "processed":  # rule 5
            skip.add(frame.steps["completed"])
            break
        if frame.kind == "run" or (frame.kind == "epoch" and frame.stage == "train"):  # rules 1, 2
            replay += _reentry(frame)
            skip.update(i for p, i in frame.steps.items() if p in ("ready", "started") and i >= cut)
            continue
        start = frame.steps["ready"]  # rules 3, 4: the batch or evaluation epoch runs again
        break
    return replay + [s for i, s in enumerate(script.steps[start:], start) if i not in skip]


def json_roundtrip(state: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(state))


def resumed(script: Script, cut: int) -> Progress:
    """Checkpoint at ``cut`` (through JSON), restore into a fresh Progress, then finish as a framework would."""
    state = json_roundtrip(driven(script, cut).state_dict())
    progress = Progress()
    progress.load_state_dict(state)
    return drive(progress, resume_steps(script, cut))


# quick starts for single-behaviour tests --------------------------------------------
def in_fit_epoch(batches: int = 0, samples: int = 8) -> Progress:
    """A Progress inside a fit run's first train epoch, after ``batches`` whole batches."""
    progress = Progress()
    progress.run_ready("fit")
    progress.run_started()
    progress.train.epoch_ready()
    progress.train.epoch_started()
    for _ in range(batches):
        whole_batch(progress, "train", samples)
    return progress


def whole_batch(progress: Progress, stage: str = "train", samples: int = 8, dataloader: int = 0) -> None:
    s = progress.stage(stage)
    s.batch_ready()
    s.batch_started()
    s.batch_processed(samples, dataloader)
    s.batch_completed()


def whole_epoch(progress: Progress, stage: str = "train", batches: int = 2, samples: int = 8) -> None:
    s = progress.stage(stage)
    s.epoch_ready()
    s.epoch_started()
    for _ in range(batches):
        whole_batch(progress, stage, samples)
    s.epoch_processed()
    s.epoch_completed()


def whole_run(progress: Progress, kind: str = "fit", epochs: int = 1, batches: int = 2) -> None:
    stage = "train" if kind == "fit" else kind
    progress.run_ready(kind)
    progress.run_started()
    for _ in range(epochs):
        whole_epoch(progress, stage, batches)
    progress.run_processed()
    progress.run_completed()


def _never() -> bool:
    return False


def hand_fit(
    tracker: Tracker,
    loader: Iterable[Any],
    epochs: int,
    train_step: Callable[[Any], list[int]],
    *,
    after_batch: Callable[[], bool] = _never,
    after_epoch: Callable[[], bool] = _never,
) -> list[int]:
    """Fit until ``epochs`` lifetime train epochs are completed, marked as a plain PyTorch loop marks them;
    ``train_step(batch)`` trains on a batch (between its started and processed marks) and returns its sample
    ids. ``after_batch()``/``after_epoch()`` are asked after each batch/epoch; True stops the fit there
    (a process killed after that checkpoint). Returns the ids seen."""
    progress, train = tracker.progress, tracker.progress.train
    seen: list[int] = []
    progress.run_ready("fit")
    progress.run_started()
    while tracker.view.train.epochs.lifetime.completed < epochs:
        train.epoch_ready()
        train.epoch_started()
        tracker.train_iterators_building()  # a reseed before the build stays
        batches = iter(loader)
        tracker.train_iterators_built()  # a resumed build the tracker did not make takes nothing from the RNGs
        for batch in batches:
            train.batch_ready()
            train.batch_started()
            ids = train_step(batch)
            train.batch_processed(len(ids))
            train.batch_completed()
            seen.extend(ids)
            if after_batch():
                return seen
        train.epoch_processed()
        train.epoch_completed()
        if after_epoch():
            return seen
    progress.run_processed()
    progress.run_completed()
    return seen


# invariants ----------------------------------------------------------------------
def plain_data_problems(value: object, path: str = "") -> list[str]:
    """Paths holding anything but dict (with str keys), list, str, int or bool."""
    if isinstance(value, dict):
        problems = [f"{path}: key {k!r}" for k in value if not isinstance(k, str)]
        for k, v in value.items():
            problems += plain_data_problems(v, f"{path}.{k}" if path else str(k))
        return problems
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in plain_data_problems(v, f"{path}.{i}")]
    if type(value) in (str, int, bool):
        return []
    return [f"{path}: {type(value).__name__}"]


def check_invariants(progress: Progress, parses: bool = True) -> None:
    """Everything that must hold at every instant of a legal event sequence.

    With ``parses`` the state_dict must also pass ``parse`` (false right after a load
    of an in-flight checkpoint: see the xfail tests on `where` in test_core_restore).
    """
    view = progress.view
    for name in STAGE_NAMES:
        stage = view.stage(name)
        batches, epochs = stage.batches, stage.epochs
        for counts in (*batches, *epochs):
            assert counts.ready >= counts.started >= counts.processed >= counts.completed >= 0, counts
            assert counts.ready - counts.completed <= 1, counts
        for phase in range(4):
            assert batches.epoch[phase] <= batches.run[phase] <= batches.lifetime[phase]
            assert epochs.run[phase] <= epochs.lifetime[phase]
        assert batches.lifetime.ready - batches.run.ready == batches.lifetime.completed - batches.run.completed
        assert batches.run.ready - batches.epoch.ready == batches.run.completed - batches.epoch.completed
        tallies = [stage.samples] + [t for d in stage.dataloaders for t in d]
        if name == "train":
            tallies += [*view.train.optimizer_steps_by_optimizer, *view.train.optimizer_steps_skipped_by_optimizer]
            tallies.append(view.train.scheduler_steps)
            assert len(view.train.optimizer_steps_by_optimizer) == len(view.train.optimizer_steps_skipped_by_optimizer)
            assert 0 <= view.train.accumulating_batches <= batches.lifetime.processed
        for tally in tallies:
            assert 0 <= tally.epoch <= tally.run <= tally.lifetime, tally
        if stage.dataloaders:
            # Steps that read a batch of several dataloaders at once (count_combined_batch) count it for
            # each: then the loaders' batches add up to at least the stage's, none beyond it, and in the
            # epoch scope (a loader's pass restarts) none is beyond it.
            combined = sum(d.batches.lifetime for d in stage.dataloaders) > batches.lifetime.processed
            for scope in range(3):
                for field, whole in (("batches", batches[scope].processed), ("samples", stage.samples[scope])):
                    parts = [getattr(d, field)[scope] for d in stage.dataloaders]
                    if combined and scope == 0:  # the epoch scope
                        assert max(parts) <= whole, (field, scope, parts, whole)
                    elif combined and field == "batches":
                        assert max(parts) <= whole <= sum(parts), (field, scope, parts, whole)
                    else:
                        assert sum(parts) == whole, (field, scope, parts, whole)
        else:
            assert batches.lifetime.processed == 0 and stage.samples.lifetime == 0
    run = view.run.counts
    assert run.ready >= run.started >= run.processed >= run.completed >= 0
    assert run.ready - run.completed <= 1
    state = progress.state_dict()
    assert plain_data_problems(state) == []
    assert json_roundtrip(state) == state
    if parses:
        parse(state)


def nothing_to_settle(state: dict[str, Any]) -> bool:
    """Loading ``state`` changes no count: no batch or evaluation epoch is in flight, and a run
    or train epoch in flight is exactly at its ``started`` phase (so re-entering it is a no-op)."""

    def settled(counts: dict[str, int], reentered: bool) -> bool:
        if counts["ready"] == counts["completed"]:
            return True
        return reentered and counts["started"] == counts["ready"] and counts["processed"] == counts["completed"]

    stages = state["stages"]
    return (
        settled(state["run"], True)
        and all(settled(s["batches"]["lifetime"], False) for s in stages.values())
        and settled(stages["train"]["epochs"]["lifetime"], True)
        and all(settled(stages[n]["epochs"]["lifetime"], False) for n in EVAL_STAGES)
    )


def final_run_processed(script: Script) -> int:
    """The cut right after the script's last ``run_processed``."""
    return max(f.steps["processed"] for f in script.frames if f.kind == "run") + 1
