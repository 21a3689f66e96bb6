"""One training scenario run under Lightning, Ignite and Accelerate (shared by the conformance and crash tests).

A :class:`Scenario` says what is trained (samples and batch size, so the last batch is
short; epochs; gradient accumulation; validation cadence) and after which train batch a
run checkpoints and stops. :func:`run` trains ``Linear(4, 1)`` with input dropout (the
global RNG matters) on samples that carry their id, read shuffled by torchdata's
``StatefulDataLoader`` (each framework saves its position, so a mid-epoch checkpoint resumes
at its batch; a plain DataLoader resumes exactly between epochs only), in fresh objects as a new process
would make them, and returns the ids every train step saw, the final weights and the
progress state read through ``tracker_core.get_progress``.

The three programs are written to do the same thing: SGD with momentum, the loss divided
by the accumulation factor, an optimizer step after every ``accumulation`` batches of an
epoch and after its last batch (Lightning's and Accelerate's rule; Ignite's trainer is a
plain ``Engine`` written to follow it), validation after every ``validate_every``-th train
batch of an epoch, and optionally a test run after the fit run. Lightning's sanity check
is left on: the adapter must not count it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

import tracker_core

FRAMEWORKS = ("lightning", "ignite", "accelerate")
TOKENS_PER_SAMPLE = 6
Record = Callable[[list[int]], None]
Trained = tuple[
    torch.nn.Module, Any
]  # the trained model, and the object get_progress knows (trainer/engine/accelerator)


class Stopped(Exception):
    """Raised right after the stop checkpoint was written: stands in for the end of the process."""


@dataclass(frozen=True)
class Scenario:
    """What is trained, and after which batch a stopping run saves its checkpoint."""

    name: str
    samples: int = 10
    batch_size: int = 3
    epochs: int = 2
    accumulation: int = 1
    validate_every: int | None = None  # validate after every k-th train batch of an epoch; k divides the epoch
    test_after: bool = False  # a test run over the validation data after the fit run
    stop: tuple[int, int] = (1, 2)  # (epoch, batch): after batch ``batch`` (1-based) of epoch ``epoch`` (0-based)
    tokens: bool = False  # batches are dicts that also hold ``input_ids`` and an ``attention_mask`` (see Indexed)

    def __post_init__(self) -> None:
        epoch, batch = self.stop
        if not (0 <= epoch < self.epochs and 1 <= batch < self.batches_per_epoch):
            raise ValueError(f"{self.name}: stop {self.stop} is not mid-epoch")
        if self.validate_every is not None:
            if self.batches_per_epoch % self.validate_every:
                raise ValueError(f"{self.name}: validate_every must divide the {self.batches_per_epoch} batches")
            if self.validates_after(batch):
                # Lightning skips a validation due after a batch it resumes from (see docs/lightning.md).
                raise ValueError(f"{self.name}: stop after a batch followed by a validation")

    @property
    def batches_per_epoch(self) -> int:
        return -(-self.samples // self.batch_size)

    @property
    def stop_batch(self) -> int:
        """The stop as a count of train batches since the run began."""
        return self.stop[0] * self.batches_per_epoch + self.stop[1]

    def validates_after(self, batch: int) -> bool:
        """True if a validation follows batch ``batch`` (1-based) of an epoch."""
        return self.validate_every is not None and batch % self.validate_every == 0


@dataclass(frozen=True)
class Saving:
    """Where checkpoints go. ``every_batch``: the framework's own rotating checkpointer keeps the two
    newest, saved after every optimizer step (Lightning) or batch; else one checkpoint at the stop."""

    directory: Path
    every_batch: bool = False


@dataclass
class Outcome:
    ids: list[list[int]] = field(default_factory=list)
    weights: list[torch.Tensor] = field(default_factory=list)
    progress: dict[str, Any] = field(default_factory=dict)


class Indexed(Dataset[Any]):
    """Sample ``i`` is ``(x_i, y_i, i)`` with fixed values drawn from ``seed``; with ``tokens``, the dict
    ``{"x", "y", "id", "input_ids", "attention_mask"}`` whose ``TOKENS_PER_SAMPLE`` tokens end in ``i % 4`` padding
    ones, so each adapter counts tokens and non-padding tokens from the batch itself."""

    def __init__(self, size: int, seed: int, tokens: bool = False) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.x = torch.randn(size, 4, generator=generator)
        self.y = torch.randn(size, 1, generator=generator)
        self.tokens = tokens

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> Any:
        if not self.tokens:
            return self.x[index], self.y[index], index
        mask = torch.ones(TOKENS_PER_SAMPLE, dtype=torch.long)
        mask[TOKENS_PER_SAMPLE - index % 4 :] = 0
        ids = torch.full((TOKENS_PER_SAMPLE,), index)
        return {"x": self.x[index], "y": self.y[index], "id": index, "input_ids": ids, "attention_mask": mask}


def _parts(batch: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(x, y, ids)`` of a batch, a tuple or a tokens scenario's dict."""
    if isinstance(batch, dict):
        return batch["x"], batch["y"], batch["id"]
    return batch[0], batch[1], batch[2]


def stop_checkpoint(framework: str, directory: Path) -> Path:
    """Where a stopping run of ``framework`` saved into ``directory``."""
    return directory / {"lightning": "stop.ckpt", "ignite": "stop.pt", "accelerate": "stop"}[framework]


def seed_everything(value: int) -> None:
    torch.manual_seed(value)
    random.seed(value)
    np.random.seed(value)


def _model() -> torch.nn.Linear:
    torch.manual_seed(0)  # the same initial weights in every process
    return torch.nn.Linear(4, 1)


def _optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def _loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, train: bool) -> torch.Tensor:
    return torch.nn.functional.mse_loss(model(torch.nn.functional.dropout(x, 0.2, training=train)), y)


def _loaders(scenario: Scenario) -> tuple[DataLoader[Any], DataLoader[Any]]:
    """The train loader, a StatefulDataLoader: a checkpoint inside an epoch resumes at its batch (a plain DataLoader
    resumes exactly between epochs only); and the validation loader (3 batches), read whole."""
    train = Indexed(scenario.samples, seed=1, tokens=scenario.tokens)
    val = Indexed(5, seed=2, tokens=scenario.tokens)
    return StatefulDataLoader(train, batch_size=scenario.batch_size, shuffle=True), DataLoader(val, batch_size=2)


def run(
    framework: str,
    scenario: Scenario,
    saving: Saving | None = None,
    resume_from: Path | None = None,
    seed: int = 0,
    record: Record | None = None,
) -> Outcome:
    """Train ``scenario`` under ``framework`` in fresh objects; stop after the stop checkpoint if
    ``saving`` asks for one (:class:`Stopped` is caught); resume from ``resume_from`` if given.

    ``seed`` seeds the global RNGs before the data is built (a resumed run must not depend
    on it); ``record`` also receives the ids of every train step.
    """
    outcome = Outcome()

    def recording(ids: list[int]) -> None:
        outcome.ids.append(ids)
        if record is not None:
            record(ids)

    runner = {"lightning": _run_lightning, "ignite": _run_ignite, "accelerate": _run_accelerate}[framework]
    model, owner = runner(scenario, saving, resume_from, seed, recording)
    outcome.weights = [p.detach().clone() for p in model.parameters()]
    outcome.progress = tracker_core.get_progress(owner).state_dict()
    return outcome


# Lightning ---------------------------------------------------------------------------------------
def _run_lightning(
    scenario: Scenario, saving: Saving | None, resume_from: Path | None, seed: int, record: Record
) -> Trained:
    import pytorch_lightning as pl
    from pytorch_lightning.callbacks import ModelCheckpoint

    from tracker_core.integrations.lightning import ProgressTracker

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = _model()

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y, ids = _parts(batch)
            record(ids.tolist())
            return _loss(self.layer, x, y, train=True)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            _loss(self.layer, *_parts(batch)[:2], train=False)

        def test_step(self, batch: Any, batch_idx: int) -> None:
            _loss(self.layer, *_parts(batch)[:2], train=False)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return _optimizer(self.layer)

    class SaveAndStop(pl.Callback):
        def __init__(self, path: Path) -> None:
            self.path = path

        def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
            batch_idx = args[-1]
            if (trainer.current_epoch, batch_idx + 1) == scenario.stop:
                trainer.save_checkpoint(self.path)
                raise Stopped

    module = Module()
    seed_everything(seed)
    train, val = _loaders(scenario)
    callbacks: list[pl.Callback] = [ProgressTracker()]
    if saving is not None and saving.every_batch:
        callbacks.append(
            ModelCheckpoint(dirpath=saving.directory, filename="{step}", every_n_train_steps=1, save_top_k=-1)
        )
    elif saving is not None:
        callbacks.append(SaveAndStop(stop_checkpoint("lightning", saving.directory)))
    validation: dict[str, Any] = {"limit_val_batches": 0}
    if scenario.validate_every is not None:
        validation = {"val_check_interval": scenario.validate_every}
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=scenario.epochs,
        accumulate_grad_batches=scenario.accumulation,
        enable_progress_bar=False,
        logger=False,
        enable_model_summary=False,
        enable_checkpointing=saving is not None and saving.every_batch,
        callbacks=callbacks,
        **validation,
    )
    try:
        trainer.fit(
            module,
            train,
            val if scenario.validate_every else None,
            ckpt_path=None if resume_from is None else str(resume_from),
            weights_only=True,
        )
    except Stopped:
        return module.layer, trainer
    if scenario.test_after:
        trainer.test(module, val, verbose=False)
    return module.layer, trainer


# Ignite ------------------------------------------------------------------------------------------
def _run_ignite(
    scenario: Scenario, saving: Saving | None, resume_from: Path | None, seed: int, record: Record
) -> Trained:
    from ignite.engine import Engine, Events
    from ignite.handlers import Checkpoint, DiskSaver

    from tracker_core.integrations.ignite import ProgressHandler

    model = _model()
    optimizer = _optimizer(model)
    seed_everything(seed)
    train, val = _loaders(scenario)

    def batch_in_epoch(engine: Engine) -> int:
        assert engine.state.epoch_length is not None
        return (engine.state.iteration - 1) % engine.state.epoch_length + 1

    def step(engine: Engine, batch: Any) -> None:
        x, y, ids = _parts(batch)
        record(ids.tolist())
        (_loss(model, x, y, train=True) / scenario.accumulation).backward()
        position = batch_in_epoch(engine)
        if position % scenario.accumulation == 0 or position == engine.state.epoch_length:
            optimizer.step()
            optimizer.zero_grad()

    def evaluate(engine: Engine, batch: Any) -> None:
        with torch.no_grad():
            _loss(model, *_parts(batch)[:2], train=False)

    trainer, evaluator, tester = Engine(step), Engine(evaluate), Engine(evaluate)
    handler = ProgressHandler()
    handler.attach(trainer, optimizers=[optimizer])
    handler.attach(evaluator, stage="validate")
    handler.attach(tester, stage="test")
    if scenario.validate_every is not None:
        due = Events.ITERATION_COMPLETED(event_filter=lambda e, _: scenario.validates_after(batch_in_epoch(e)))
        trainer.add_event_handler(due, lambda: evaluator.run(val))
    to_save = {"trainer": trainer, "model": model, "optimizer": optimizer, "progress": handler}
    if saving is not None and saving.every_batch:
        checkpoint = Checkpoint(
            to_save,
            DiskSaver(str(saving.directory), require_empty=False),
            n_saved=3,
            global_step_transform=lambda e, _: e.state.iteration,
        )
        trainer.add_event_handler(Events.ITERATION_COMPLETED, checkpoint)
    elif saving is not None:
        checkpoint = Checkpoint(
            to_save,
            DiskSaver(str(saving.directory), require_empty=False),
            filename_pattern=stop_checkpoint("ignite", saving.directory).name,
        )

        def save_and_stop(engine: Engine) -> None:
            if (engine.state.epoch - 1, batch_in_epoch(engine)) == scenario.stop:
                checkpoint(engine)
                raise Stopped

        trainer.add_event_handler(Events.ITERATION_COMPLETED, save_and_stop)
    if resume_from is not None:
        Checkpoint.load_objects(to_save, str(resume_from))
    try:
        trainer.run(train, max_epochs=scenario.epochs)
    except Stopped:
        return model, trainer
    if scenario.test_after:
        tester.run(val)
    return model, trainer


# Accelerate --------------------------------------------------------------------------------------
def _run_accelerate(
    scenario: Scenario, saving: Saving | None, resume_from: Path | None, seed: int, record: Record
) -> Trained:
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState
    from accelerate.utils import DataLoaderConfiguration, ProjectConfiguration

    from tracker_core.integrations.accelerate import AcceleratorProgress

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    project = None
    if saving is not None and saving.every_batch:
        project = ProjectConfiguration(
            project_dir=str(saving.directory), automatic_checkpoint_naming=True, total_limit=3
        )
    accelerator = Accelerator(
        cpu=True,
        gradient_accumulation_steps=scenario.accumulation,
        project_config=project,
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True),  # save_state saves its position
    )
    model = _model()
    optimizer = _optimizer(model)
    seed_everything(seed)
    train, val = _loaders(scenario)
    # Only the train loader is prepared: with use_stateful_dataloader, prepare() would make the validation loader a
    # StatefulDataLoader too, whose state load_state restores, warned when its first pass begins after the load
    # (integrations/accelerate/_evaluation.py). On one CPU process prepare() only wraps the loader.
    model, optimizer, train = accelerator.prepare(model, optimizer, train)
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    progress.track_train_loader(train)
    if resume_from is not None:
        accelerator.load_state(str(resume_from))
        accelerator.project_configuration.iteration = progress.next_save_iteration  # automatic naming continues
    view = progress.view
    with progress.fit(scenario.epochs) as fit:
        for epoch in fit.epochs():
            for data in progress.train(train):
                x, y, ids = _parts(data)
                record(ids.tolist())
                with accelerator.accumulate(model):
                    accelerator.backward(_loss(model, x, y, train=True))
                    optimizer.step()
                    optimizer.zero_grad()
                batch = view.batch_index + 1  # Accelerate has no count of its own of the batches in this epoch
                if saving is not None and saving.every_batch:
                    accelerator.save_state()
                elif saving is not None and (epoch, batch) == scenario.stop:
                    accelerator.save_state(str(stop_checkpoint("accelerate", saving.directory)))
                    return model, accelerator
                if scenario.validates_after(batch):
                    with torch.no_grad():
                        for data in progress.evaluate(val):
                            _loss(model, *_parts(data)[:2], train=False)
    if scenario.test_after:
        with torch.no_grad():
            for data in progress.test(val):
                _loss(model, *_parts(data)[:2], train=False)
    return model, accelerator
