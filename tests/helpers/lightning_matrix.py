"""Lightning programs for the robustness tests and the oracle matrix, for both Lightning packages.

``Config`` describes one program: the Trainer's limits, the data, what ``training_step`` does, an
exception, the calls made on one Trainer, and a resume from a checkpoint at some train batch.
``run(config, path)`` runs it with a ``ProgressTracker`` and the ``Oracle`` and returns what the
oracle saw, any exception that did not come from the program itself, and, for a resume, whether it
ended exactly like the uninterrupted program (weights, sample ids, progress).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import importlib
import random
import warnings
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

from tracker_core import InexactResumeWarning, get_progress
from tracker_core.integrations.lightning import ProgressTracker

from helpers.lightning_oracle import Oracle
from helpers.lightning_program import Indexed

PACKAGES = ("pytorch_lightning", "lightning.pytorch")
MODES = ("max_size_cycle", "min_size", "max_size", "sequential")


class Planned(Exception):
    """The exception a program raises on purpose."""


@dataclasses.dataclass(frozen=True)
class Config:
    package: str = "pytorch_lightning"
    max_epochs: int = 2
    max_steps: int = -1
    accumulate: int = 1
    limit_train: float | int = 1.0
    limit_val: float | int = 1.0
    val_check_interval: float | int = 1.0
    check_val_every_n_epoch: int = 1
    sanity_steps: int = 0
    train_sizes: tuple[int, ...] = (10,)  # one loader per size, batches of 3
    combined_mode: str = "max_size_cycle"  # when several train loaders
    val_sizes: tuple[int, ...] = (7,)
    manual: bool = False  # manual optimization with two optimizers, plain loss.backward()
    none_every: int = 0  # training_step returns None on every n-th batch
    dataloader_iter: bool = False
    raise_in: str = ""  # "train", "validate", "test", "predict": raise at that stage's second batch, once
    calls: tuple[str, ...] = ("fit",)  # then any of fit (again, max_epochs + 1), validate, test, predict
    resume_at: int = -1  # save at the end of this train batch (counted over the first fit), resume in a new Trainer
    shuffle: bool = True
    stateful: bool = False  # train loaders are torchdata StatefulDataLoaders (exact at every batch), not DataLoaders

    def label(self) -> str:
        fields = dataclasses.fields(self)
        return (
            ",".join(f"{f.name}={getattr(self, f.name)}" for f in fields if getattr(self, f.name) != f.default)
            or "default"
        )


@dataclasses.dataclass
class Outcome:
    disagreements: list[str]
    adapter_errors: list[str]  # exceptions raised by something else than the program on purpose
    seen: list[list[int]]
    weights: list[torch.Tensor]
    progress: dict[str, Any]
    exact: bool | None = None  # a resume: ended exactly as the uninterrupted program
    inexact_warnings: list[str] = dataclasses.field(default_factory=list)  # InexactResumeWarning messages

    @property
    def passed(self) -> bool:
        """No disagreement, no error, and a resume exact or said to be inexact."""
        return (
            not self.disagreements
            and not self.adapter_errors
            and (self.exact is not False or bool(self.inexact_warnings))
        )


def _package(name: str) -> Any:
    return importlib.import_module(name)


def model(config: Config) -> Any:
    """A LightningModule of ``config.package`` recording the sample ids it trains on."""
    pl = _package(config.package)

    class Model(pl.LightningModule):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            self.second = torch.nn.Linear(1, 1)
            self.automatic_optimization = not config.manual
            self.seen: list[list[int]] = []
            self.raised = False

        def _maybe_raise(self, stage: str, batch_idx: int) -> None:
            if config.raise_in == stage and batch_idx == 1 and not self.raised:
                self.raised = True
                raise Planned(stage)

        def _loss(self, batch: Any, noisy: bool = True) -> torch.Tensor:
            if len(config.train_sizes) > 1 and self.trainer.training:  # a combined batch: one per loader
                batch = next(b for b in batch if b is not None)
            x, y, _ = batch
            if noisy:
                x = x + 0.01 * torch.randn_like(x)
            return torch.nn.functional.mse_loss(self.second(self.layer(x)), y)

        def _ids(self, batch: Any) -> list[int]:
            parts = batch if len(config.train_sizes) > 1 else [batch]
            return [int(i) for part in parts if part is not None for i in part[2]]

        def _train(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
            self._maybe_raise("train", batch_idx)
            self.seen.append(self._ids(batch))
            loss = self._loss(batch)
            if config.manual:
                first, second = self.optimizers()
                first.zero_grad()
                second.zero_grad()
                loss.backward()  # plain backward: Lightning's on_before_backward does not run
                first.step()
                if batch_idx % 2 == 1:
                    second.step()
                return None
            if config.none_every and batch_idx % config.none_every == config.none_every - 1:
                return None
            return loss

        def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self._maybe_raise("validate", batch_idx)
            self._loss(batch, noisy=False)

        def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self._maybe_raise("test", batch_idx)
            self._loss(batch, noisy=False)

        def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
            self._maybe_raise("predict", batch_idx)
            return self.layer(batch[0])

        def configure_optimizers(self) -> Any:
            if config.manual:
                return [
                    torch.optim.SGD(self.layer.parameters(), lr=0.1),
                    torch.optim.SGD(self.second.parameters(), lr=0.1),
                ]
            return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    if config.dataloader_iter:

        class IterModel(Model):
            def training_step(self, dataloader_iter: Any) -> torch.Tensor | None:
                batch, batch_idx, _ = next(dataloader_iter)
                return self._train(batch, batch_idx)

        return IterModel()

    class StepModel(Model):
        def training_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor | None:
            return self._train(batch, batch_idx)

    return StepModel()


def train_data(config: Config) -> Any:
    cls: Any = DataLoader
    if config.stateful:
        from torchdata.stateful_dataloader import StatefulDataLoader

        cls = StatefulDataLoader
    loaders = [cls(Indexed(n), batch_size=3, shuffle=config.shuffle) for n in config.train_sizes]
    if len(loaders) == 1:
        return loaders[0]
    combined = importlib.import_module(f"{config.package}.utilities.combined_loader").CombinedLoader
    return combined(loaders, mode=config.combined_mode)


def eval_data(config: Config) -> list[DataLoader[Any]]:
    return [DataLoader(Indexed(n), batch_size=3) for n in config.val_sizes]


def _save_at(config: Config, at: int, path: Path) -> Any:
    """A callback saving a checkpoint at the end of train batch number ``at`` of the program, then stopping it."""
    pl = _package(config.package)

    class Save(pl.Callback):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            self.count = 0

        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            self.count += 1
            if self.count == at + 1:
                trainer.save_checkpoint(path)
                raise Stop

    return Save()


class Stop(Exception):
    """Stands in for the process being killed right after a checkpoint."""


def trainer(config: Config, callbacks: list[Any], max_epochs: int | None = None, **overrides: Any) -> Any:
    """A CPU Trainer of ``config.package`` with ``config``'s limits (``overrides`` replace any argument)."""
    pl = _package(config.package)
    arguments: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": 1,
        "max_epochs": config.max_epochs if max_epochs is None else max_epochs,
        "max_steps": config.max_steps,
        "accumulate_grad_batches": 1 if config.manual else config.accumulate,
        "limit_train_batches": config.limit_train,
        "limit_val_batches": config.limit_val,
        "val_check_interval": config.val_check_interval,
        "check_val_every_n_epoch": config.check_val_every_n_epoch,
        "num_sanity_val_steps": config.sanity_steps,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "logger": False,
        "callbacks": callbacks,
    }
    arguments.update(overrides)
    return pl.Trainer(**arguments)


def _calls(config: Config, fit: Any, module: Any, errors: list[str], first_fit_ckpt: Path | None = None) -> None:
    """Every call of ``config.calls`` on one Trainer; the program's own exception is expected, others are errors."""
    fits = 0
    for call in config.calls:
        try:
            if call == "fit":
                fits += 1
                if fits > 1 and config.max_steps > 0:  # a finished fit continued with more steps
                    fit.fit_loop.epoch_loop.max_steps = config.max_steps + 2
                elif fits > 1:  # or one more epoch
                    fit.fit_loop.max_epochs = config.max_epochs + 1
                ckpt_path = first_fit_ckpt if fits == 1 else None
                fit.fit(module, train_data(config), eval_data(config), ckpt_path=ckpt_path)
            elif call == "validate":
                fit.validate(module, eval_data(config), verbose=False)
            elif call == "test":
                fit.test(module, eval_data(config), verbose=False)
            else:
                fit.predict(module, eval_data(config))
        except Planned:
            continue
        except Stop:
            raise
        except Exception as error:
            errors.append(f"{call}: {type(error).__name__}: {error}")


def run(config: Config, path: Path, seed: int = 0) -> Outcome:
    """Run ``config`` with the tracker and the oracle; with ``resume_at``, also interrupted and resumed."""
    straight = _run_once(config, seed)
    if config.resume_at < 0:
        return straight
    checkpoint = path / "mid.ckpt"
    first = _run_once(config, seed, save_at=config.resume_at, path=checkpoint)
    if not checkpoint.exists():  # the program ended before that batch
        return straight
    resumed = _run_once(config, seed + 1234, resume=checkpoint)
    exact = (
        first.seen + resumed.seen == straight.seen
        and all(torch.equal(a, b) for a, b in zip(resumed.weights, straight.weights, strict=True))
        and _comparable(resumed.progress) == _comparable(straight.progress)
    )
    return Outcome(
        straight.disagreements + first.disagreements + resumed.disagreements,
        straight.adapter_errors + first.adapter_errors + resumed.adapter_errors,
        resumed.seen,
        resumed.weights,
        resumed.progress,
        exact,
        first.inexact_warnings + resumed.inexact_warnings,
    )


def _comparable(progress: dict[str, Any]) -> dict[str, Any]:
    """The progress minus the anomalies (an exception before the checkpoint is noted in the resumed one only)
    and the run ledger (the resumed one also lists the stopped run)."""
    progress = copy.deepcopy(progress)
    progress.pop("anomalies", None)
    progress.pop("ledger", None)
    return progress


def _run_once(
    config: Config, seed: int, save_at: int = -1, path: Path | None = None, resume: Path | None = None
) -> Outcome:
    torch.manual_seed(seed)
    random.seed(seed)
    tracker = ProgressTracker()
    oracle = Oracle()
    callbacks = [tracker, oracle]
    if save_at >= 0:
        assert path is not None
        callbacks.append(_save_at(config, save_at, path))
    module = model(config)
    fit = trainer(config, callbacks)
    errors: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with contextlib.suppress(Stop):
            _calls(config, fit, module, errors, first_fit_ckpt=resume)
        if errors and resume is None and save_at < 0:
            errors = [error for error in errors if error not in _errors_without_the_tracker(config, seed)]
    oracle.check_anomalies(get_progress(fit))
    return Outcome(
        oracle.disagreements,
        errors,
        module.seen,
        [p.detach().clone() for p in module.parameters()],
        tracker.tracker.progress.state_dict(),
        inexact_warnings=[str(w.message) for w in caught if issubclass(w.category, InexactResumeWarning)],
    )


def _errors_without_the_tracker(config: Config, seed: int) -> list[str]:
    """The errors of the same program without the tracker: Lightning's, not the adapter's (e.g. a bad setting)."""
    torch.manual_seed(seed)
    errors: list[str] = []
    _calls(config, trainer(config, []), model(config), errors)
    return errors


def generate(count: int, seed: int) -> list[Config]:
    """``count`` distinct configurations drawn with ``seed`` from every combination the matrix covers."""
    rng = random.Random(seed)
    configs: dict[str, Config] = {}
    while len(configs) < count:
        config = _draw(rng)
        configs.setdefault(config.label(), config)
    return list(configs.values())


def _draw(rng: random.Random) -> Config:
    several_train = rng.random() < 0.25
    manual = rng.random() < 0.15
    max_steps = rng.choice([-1, -1, -1, 3, 5, 7])
    interval = rng.choice([1.0, 1.0, 0.5, 2, 3])
    limit_train = rng.choice([1.0, 1.0, 1.0, 3, 0.5, 0])
    if isinstance(interval, int) and isinstance(limit_train, (int, float)) and limit_train != 1.0:
        interval = 1.0  # an int interval must not exceed the number of train batches
    raise_in = rng.choice(["", "", "", "", "train", "validate", "test", "predict"])
    calls = rng.choice(
        [("fit",), ("fit",), ("fit", "validate", "test", "predict"), ("fit", "fit"), ("validate", "fit")]
    )
    return Config(
        package=rng.choice(PACKAGES),
        max_epochs=rng.choice([1, 2, 3]) if max_steps < 0 else -1,
        max_steps=max_steps,
        accumulate=1 if manual else rng.choice([1, 1, 2, 3]),
        limit_train=limit_train,
        limit_val=rng.choice([1.0, 1.0, 2, 0]),
        val_check_interval=interval,
        check_val_every_n_epoch=rng.choice([1, 1, 2]) if interval == 1.0 or isinstance(interval, float) else 1,
        sanity_steps=rng.choice([0, 0, 2]),
        train_sizes=rng.choice([(10, 7), (7, 10), (10, 4, 7)]) if several_train else (10,),
        combined_mode=rng.choice(MODES),
        val_sizes=rng.choice([(7,), (7,), (5, 8)]),
        manual=manual,
        none_every=0 if manual else rng.choice([0, 0, 0, 2, 3]),
        dataloader_iter=(not several_train) and rng.random() < 0.1,
        raise_in=raise_in,
        calls=calls,
        resume_at=-1 if raise_in else rng.choice([-1, -1, 0, 1, 2, 3, 5, 6]),
        shuffle=rng.random() < 0.7,
    )
