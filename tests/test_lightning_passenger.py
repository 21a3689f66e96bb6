"""The Lightning adapter is a passenger: every ordinary workflow runs as without it, and the view agrees with
Lightning's counters at every hook (the oracle) — issue 13, items 1-8 and 17, with both Lightning packages."""

from __future__ import annotations

import contextlib
import copy
import importlib
import io
import pickle
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")

import torch
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import InexactResumeWarning, get_progress
from tracker_core.integrations.lightning import GRADIENTS_KEY, STATE_KEY, ProgressTracker

from helpers.ledger import without_ledger
from helpers.lightning_matrix import PACKAGES, Config, Planned, model, trainer
from helpers.lightning_oracle import Oracle
from helpers.lightning_program import Indexed, Recording, SaveAndStop, Stop

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _loader(n: int = 10) -> DataLoader[Any]:
    return DataLoader(Indexed(n), batch_size=3, shuffle=True)


def _resumable_loader() -> StatefulDataLoader[Any]:
    """As :func:`_loader` with a state of its own: a mid-epoch checkpoint resumes it at its batch."""
    return StatefulDataLoader(Indexed(10), batch_size=3, shuffle=True)


def _agrees(oracle: Oracle) -> None:
    assert oracle.disagreements == []
    assert oracle.checked > 0


def _with_loaders(config: Config) -> Any:
    """A module of ``config`` whose train/val/test/predict loaders come from its own *_dataloader methods."""
    base = type(model(config))

    class WithLoaders(base):  # type: ignore[misc,valid-type]
        def train_dataloader(self) -> DataLoader[Any]:
            return _loader()

        def val_dataloader(self) -> DataLoader[Any]:
            return _loader(7)

        def test_dataloader(self) -> DataLoader[Any]:
            return _loader(7)

        def predict_dataloader(self) -> DataLoader[Any]:
            return _loader(7)

    return WithLoaders()


def _datamodule(package: str) -> Any:
    pl = importlib.import_module(package)

    class Data(pl.LightningDataModule):  # type: ignore[misc,name-defined]
        def train_dataloader(self) -> DataLoader[Any]:
            return _loader()

        def val_dataloader(self) -> DataLoader[Any]:
            return _loader(7)

        def test_dataloader(self) -> DataLoader[Any]:
            return _loader(7)

        def predict_dataloader(self) -> DataLoader[Any]:
            return _loader(7)

    return Data()


# 1 ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("package", PACKAGES)
@pytest.mark.parametrize("source", ["module", "datamodule"])
@pytest.mark.parametrize("ckpt", ["best", "last", "path"])
def test_fit_then_test_validate_and_predict_from_a_checkpoint_on_the_same_trainer(
    package: str, source: str, ckpt: str, tmp_path: Path
) -> None:
    pl = importlib.import_module(package)
    config = Config(package=package)
    oracle = Oracle()
    checkpoints = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, save_last=True)
    fit = pl.Trainer(
        accelerator="cpu", max_epochs=2, logger=False, enable_progress_bar=False, enable_model_summary=False,
        callbacks=[ProgressTracker(), oracle, checkpoints],
    )  # fmt: skip
    module = _with_loaders(config) if source == "module" else model(config)
    data = {"datamodule": _datamodule(package)} if source == "datamodule" else {}
    fit.fit(module, **data)
    path = str(tmp_path / "last.ckpt") if ckpt == "path" else ckpt
    fit.test(module, ckpt_path=path, verbose=False, **data)
    fit.validate(module, ckpt_path=path, verbose=False, **data)
    fit.predict(module, ckpt_path=path, **data)
    view = get_progress(fit)  # the record goes on counting this Trainer's runs
    assert view.run.kind == "predict" and view.run.counts.completed == 4
    assert view.validate.batches.lifetime.completed == 2 * 3 + 3
    assert view.test.batches.lifetime.completed == view.predict.batches.lifetime.completed == 3
    _agrees(oracle)


# 2 ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("nothing", ["max_epochs=0", "limit_train_batches=0", "finished checkpoint"])
def test_a_fit_that_trains_nothing_then_every_kind_of_call_on_the_same_trainer(nothing: str, tmp_path: Path) -> None:
    config = Config()
    module = model(config)
    path = tmp_path / "done.ckpt"
    if nothing == "finished checkpoint":
        done = trainer(config, [ProgressTracker()])
        done.fit(module, _loader())
        done.save_checkpoint(path)
    oracle = Oracle()
    limits: dict[str, Any] = {"max_epochs=0": {"max_epochs": 0}, "limit_train_batches=0": {"limit_train_batches": 0}}
    fit = trainer(config, [ProgressTracker(), oracle], **limits.get(nothing, {}))
    fit.fit(module, _loader(), ckpt_path=path if path.exists() else None)
    fit.validate(module, _loader(7), verbose=False)
    fit.test(module, _loader(7), verbose=False)
    fit.predict(module, _loader(7))
    view = get_progress(fit)
    assert view.run.counts.completed == view.run.counts.ready
    assert view.anomalies == ()
    _agrees(oracle)


# 3 ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("stage", ["train", "validate", "test", "predict"])
def test_an_exception_in_any_stage_then_the_same_trainer_serves_every_kind_of_call(stage: str) -> None:
    config = Config(raise_in=stage)
    module = model(config)
    oracle = Oracle()
    fit = trainer(config, [ProgressTracker(), oracle])
    calls = {
        "fit": lambda: fit.fit(module, _loader(), _loader(7)),
        "validate": lambda: fit.validate(module, _loader(7), verbose=False),
        "test": lambda: fit.test(module, _loader(7), verbose=False),
        "predict": lambda: fit.predict(module, _loader(7)),
    }
    first = {"train": "fit", "validate": "validate"}.get(stage, stage)
    with pytest.raises(Planned):
        calls[first]()
    for call in ("fit", "validate", "test", "predict", "fit"):
        calls[call]()
    view = get_progress(fit)
    assert view.run.counts.completed == view.run.counts.ready
    assert [a for a in view.anomalies if " cut: " not in a] == []
    assert any(a.startswith("Planned in ") for a in view.anomalies)
    _agrees(oracle)


# 4 ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("package", PACKAGES)
@pytest.mark.parametrize("limit", ["max_epochs", "max_steps"])
def test_a_finished_run_continued_from_its_checkpoint_keeps_lightnings_step_and_epoch(
    package: str, limit: str, tmp_path: Path
) -> None:
    config = Config(
        package=package, max_epochs=-1 if limit == "max_steps" else 2, max_steps=5 if limit == "max_steps" else -1
    )
    first = trainer(config, [ProgressTracker()])
    first.fit(model(config), _loader())
    first.save_checkpoint(tmp_path / "done.ckpt")
    longer = (
        dataclass_replace(config, max_epochs=4) if limit == "max_epochs" else dataclass_replace(config, max_steps=9)
    )
    oracle = Oracle()
    second = trainer(longer, [ProgressTracker(), oracle])
    second.fit(model(longer), _loader(), ckpt_path=tmp_path / "done.ckpt")
    view = get_progress(second)
    assert view.global_step == second.global_step == (16 if limit == "max_epochs" else 9)
    assert view.epoch_index == second.current_epoch
    assert view.run.counts.completed == 1  # the same run, continued
    _agrees(oracle)


def test_a_fit_from_a_checkpoint_saved_after_a_test_call_notes_lightnings_step_and_epoch(tmp_path: Path) -> None:
    config = Config()
    first = trainer(config, [ProgressTracker()])
    module = model(config)
    first.fit(module, _loader())
    first.test(module, _loader(7))
    first.save_checkpoint(tmp_path / "after_test.ckpt")
    longer = dataclass_replace(config, max_epochs=3)
    second = trainer(longer, [ProgressTracker()])
    with pytest.warns(RuntimeWarning, match=r"global_step 8, epoch 2\)"):
        second.fit(model(longer), _loader(), ckpt_path=tmp_path / "after_test.ckpt")
    view = get_progress(second)
    assert (second.global_step, view.global_step) == (12, 4)  # the run scope starts at 0 (docs/lightning.md)
    assert view.train.batches.lifetime.completed == 12


def test_a_finished_fit_continued_on_the_same_trainer_keeps_lightnings_step_and_epoch() -> None:
    config = Config()
    oracle = Oracle()
    fit = trainer(config, [ProgressTracker(), oracle])
    module = model(config)
    fit.fit(module, _loader())
    fit.fit_loop.max_epochs = 3
    fit.fit(module, _loader())
    view = get_progress(fit)
    assert (view.global_step, view.epoch_index) == (fit.global_step, fit.current_epoch) == (12, 3)
    _agrees(oracle)


def dataclass_replace(config: Config, **changes: Any) -> Config:
    import dataclasses

    return dataclasses.replace(config, **changes)


# 5 ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "config",
    [Config(none_every=2), Config(dataloader_iter=True), Config(manual=True)],
    ids=["training_step returns None", "training_step(dataloader_iter)", "manual optimization, loss.backward()"],
)
def test_unusual_training_steps_agree_with_lightning(config: Config) -> None:
    oracle = Oracle()
    fit = trainer(config, [ProgressTracker(), oracle])
    fit.fit(model(config), _loader(), [_loader(7)])
    view = get_progress(fit)
    assert view.global_step == fit.global_step
    assert view.train.samples.run == 20
    _agrees(oracle)


def test_manual_optimization_steps_belong_to_their_batch_and_leave_no_accumulation_window(tmp_path: Path) -> None:
    config = Config(manual=True, max_epochs=1)
    pl = importlib.import_module(config.package)

    class SaveMidEpoch(pl.Callback):  # type: ignore[misc,name-defined]
        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            if trainer.fit_loop.epoch_loop.batch_idx == 1:
                assert not get_progress(trainer).is_mid_accumulation
                trainer.save_checkpoint(tmp_path / "mid.ckpt")

    fit = trainer(config, [ProgressTracker(), SaveMidEpoch()])
    fit.fit(model(config), _loader())
    assert get_progress(fit).train.accumulating_batches == 0


class _AccumulatingByHand(Recording):
    """Two optimizers: the first accumulates over 2 batches by hand, the second steps at every batch."""

    def __init__(self) -> None:
        super().__init__(manual=True)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        self.seen.append([int(i) for i in batch[2]])
        first, second = self.optimizers()  # type: ignore[misc]
        loss = self.loss(batch)
        self.manual_backward(loss / 2, retain_graph=True)  # into both layers' gradients
        if batch_idx % 2 == 1:
            first.step()
            first.zero_grad()
        self.second.zero_grad()
        self.manual_backward(loss, inputs=list(self.second.parameters()))
        second.step()
        second.zero_grad()


# global_step counts both optimizers' steps: 1 after batch 0 (the first one's window open), 3 after batch 1 (closed)
@pytest.mark.parametrize("at", [1, 3])
def test_a_resume_where_one_of_several_optimizers_accumulates_by_hand_is_exact(at: int, tmp_path: Path) -> None:
    def fit(seed: int, *callbacks: Any, ckpt_path: Path | None = None) -> Any:
        torch.manual_seed(seed)
        module = _AccumulatingByHand()
        with contextlib.suppress(Stop):
            trainer(Config(max_epochs=2), [ProgressTracker(), *callbacks]).fit(
                module, _resumable_loader(), ckpt_path=ckpt_path
            )
        return module

    straight = fit(0)
    first = fit(0, SaveAndStop(tmp_path / "mid.ckpt", at))
    resumed = fit(1234, ckpt_path=tmp_path / "mid.ckpt")
    assert (GRADIENTS_KEY in torch.load(tmp_path / "mid.ckpt", weights_only=True)) is (at == 1)
    assert first.seen + resumed.seen == straight.seen
    assert all(torch.equal(a, b) for a, b in zip(resumed.parameters(), straight.parameters(), strict=True))


# 6 ----------------------------------------------------------------------------------------------
def test_a_checkpoint_inside_a_validation_batch_resumes_that_validation_as_lightning_does(tmp_path: Path) -> None:
    config = Config(val_check_interval=2, max_epochs=1, raise_in="validate")
    pl = importlib.import_module(config.package)
    plain = dataclass_replace(config, raise_in="")
    straight = trainer(plain, [ProgressTracker()])
    straight.fit(model(plain), _loader(), _loader(12))
    on_exception = pl.callbacks.OnExceptionCheckpoint(tmp_path)
    first = trainer(config, [ProgressTracker(), on_exception], enable_checkpointing=True)
    with pytest.raises(Planned), pytest.warns(InexactResumeWarning, match="checkpoint saved inside a validation"):
        first.fit(model(config), _loader(), _loader(12))
    oracle = Oracle()
    resumed = trainer(plain, [ProgressTracker(), oracle])
    with pytest.warns(InexactResumeWarning, match="re-reading its data from the first batch"):
        resumed.fit(model(plain), _loader(), _loader(12), ckpt_path=tmp_path / "on_exception.ckpt")
    assert get_progress(resumed).validate.batches.lifetime == get_progress(straight).validate.batches.lifetime
    assert get_progress(resumed).validate.epochs.lifetime == get_progress(straight).validate.epochs.lifetime
    _agrees(oracle)


# 7 ----------------------------------------------------------------------------------------------
def test_the_trainer_and_the_callback_pickle_and_copy_with_their_progress() -> None:
    config = Config()
    callback = ProgressTracker()
    fit = trainer(config, [callback])
    fit.fit(Recording(), _loader())  # a module-level class: torch.save pickles the module too
    torch.save(fit, io.BytesIO())
    copied = copy.deepcopy(fit)
    unpickled = pickle.loads(pickle.dumps(callback))
    assert get_progress(fit).state_dict() == unpickled.tracker.view.state_dict()
    copied_tracker = next(c for c in copied.callbacks if isinstance(c, ProgressTracker))
    assert copied_tracker.tracker.view.train.batches.lifetime == get_progress(fit).train.batches.lifetime


def test_ddp_spawn_counts_in_the_spawned_process_and_the_main_process_runs_on(tmp_path: Path) -> None:
    """The callback travels to the spawned process (pickled) and counts there: a checkpoint written there holds
    its record, in step with Lightning's loops. Lightning sends the main process the weights and metrics back
    (no launcher hook for a callback's state), not global_step and not the record: there, get_progress says no
    tracker is attached, and a checkpoint saved there holds no progress, as Lightning's loops hold none."""
    pl = importlib.import_module("pytorch_lightning")
    last = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, save_last=True, save_top_k=0)
    fit = pl.Trainer(
        accelerator="cpu", devices=1, strategy="ddp_spawn", max_epochs=1, logger=False, enable_progress_bar=False,
        enable_model_summary=False, callbacks=[ProgressTracker(), last], default_root_dir=tmp_path,
    )  # fmt: skip
    fit.fit(Recording(), _loader())
    assert fit.state.finished
    child = torch.load(tmp_path / "last.ckpt", weights_only=True)
    progress = child["callbacks"][STATE_KEY]["progress"]
    assert child["global_step"] == 4
    assert _saved_global_step(progress) == 4
    assert fit.global_step == 0  # Lightning's own counters stay in the spawned process
    with pytest.raises(LookupError, match="no progress tracker is attached"):
        get_progress(fit)
    fit.save_checkpoint(tmp_path / "main.ckpt")
    main = torch.load(tmp_path / "main.ckpt", weights_only=True)
    assert main["global_step"] == 0
    assert _saved_global_step(main["callbacks"][STATE_KEY]["progress"]) == 0


def _saved_global_step(progress: dict[str, Any]) -> int:
    """``global_step`` of a saved progress entry, read back through a record that loads it."""
    tracker = ProgressTracker()
    tracker.tracker.progress.load_state_dict(progress)
    return tracker.tracker.view.global_step


# 8 ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("call", ["validate", "test"])
def test_an_evaluation_over_zero_batches_is_a_run(call: str) -> None:
    config = Config(limit_val=0)
    fit = trainer(config, [ProgressTracker()], limit_test_batches=0)
    getattr(fit, call)(model(config), _loader(7), verbose=False)
    view = get_progress(fit)
    assert view.run.kind == call
    assert view.run.counts == (1, 1, 1, 1)


@pytest.mark.parametrize("call", ["validate", "test"])
def test_after_an_evaluation_cut_by_an_exception_one_over_zero_batches_is_a_run(call: str) -> None:
    """Lightning runs ``on_exception`` and no ``teardown`` after an exception: the next call's ``setup`` begins its
    run afresh."""
    config = Config(raise_in=call)
    pl = importlib.import_module(config.package)
    hooks: list[str] = []

    class Hooks(pl.Callback):  # type: ignore[misc,name-defined]
        def on_exception(self, *args: Any) -> None:
            hooks.append("on_exception")

        def teardown(self, *args: Any) -> None:
            hooks.append("teardown")

    callback = ProgressTracker()
    with pytest.raises(Planned):
        getattr(trainer(config, [callback, Hooks()]), call)(model(config), _loader(7), verbose=False)
    assert hooks == ["on_exception"]
    empty = trainer(Config(limit_val=0), [callback], limit_test_batches=0)
    getattr(empty, call)(model(config), _loader(7), verbose=False)
    view = get_progress(empty)
    assert view.run.kind == call
    assert view.run.counts == (2, 2, 2, 2)  # the cut run closed at setup, this one counted at teardown


# 17 ---------------------------------------------------------------------------------------------
def test_a_checkpoint_written_at_the_end_of_a_mid_epoch_validation_resumes_exactly_without_warning(
    tmp_path: Path,
) -> None:
    config = Config(val_check_interval=2, max_epochs=2)
    pl = importlib.import_module(config.package)

    class SaveAtFirstValidationEnd(pl.Callback):  # type: ignore[misc,name-defined]
        """What ModelCheckpoint(monitor=...) does at a validation's end; then the process dies."""

        def on_validation_end(self, trainer: Any, *args: Any) -> None:
            if not trainer.sanity_checking:
                trainer.save_checkpoint(tmp_path / "val.ckpt")
                raise Planned

    torch.manual_seed(0)
    straight_module = model(config)
    straight = trainer(config, [ProgressTracker()])
    straight.fit(straight_module, _resumable_loader(), _loader(7))
    torch.manual_seed(0)
    first_module = model(config)
    with pytest.raises(Planned):
        trainer(config, [ProgressTracker(), SaveAtFirstValidationEnd()]).fit(
            first_module, _resumable_loader(), _loader(7)
        )
    torch.manual_seed(1)
    resumed_module = model(config)
    tracker = ProgressTracker()
    with warnings.catch_warnings():
        warnings.simplefilter("error", InexactResumeWarning)
        trainer(config, [tracker]).fit(resumed_module, _resumable_loader(), _loader(7), ckpt_path=tmp_path / "val.ckpt")
    assert first_module.seen + resumed_module.seen == straight_module.seen
    assert all(
        torch.equal(a, b) for a, b in zip(resumed_module.parameters(), straight_module.parameters(), strict=True)
    )
    assert without_ledger(tracker.tracker.view.state_dict()) == without_ledger(get_progress(straight).state_dict())
