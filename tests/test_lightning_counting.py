"""The Lightning adapter's counts agree with Lightning's own counters at every hook, in many configurations."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("torchdata")

import pytorch_lightning as pl
from pytorch_lightning.trainer.states import TrainerFn

from tracker_core import get_progress
from tracker_core.integrations.lightning import ProgressTracker

from helpers.lightning_program import Recording, loader, trainer

_HOOKS = [
    "on_fit_start", "on_train_start", "on_train_epoch_start", "on_train_batch_start", "on_before_backward",
    "on_after_backward", "on_before_optimizer_step", "on_before_zero_grad", "on_train_batch_end",
    "on_train_epoch_end", "on_validation_start", "on_validation_epoch_start", "on_validation_batch_start",
    "on_validation_batch_end", "on_validation_epoch_end", "on_validation_end", "on_train_end",
    "on_sanity_check_start", "on_sanity_check_end", "on_test_start", "on_test_epoch_start", "on_test_batch_start",
    "on_test_batch_end", "on_test_epoch_end", "on_test_end", "on_predict_start", "on_predict_epoch_start",
    "on_predict_batch_start", "on_predict_batch_end", "on_predict_epoch_end", "on_predict_end",
]  # fmt: skip


def _phases(progress: Any) -> tuple[int, int, int, int]:
    return (progress.ready, progress.started, progress.processed, progress.completed)


class Agreement(pl.Callback):
    """Registered after the tracker: at every hook, compares its view with Lightning's counters."""

    def __init__(self) -> None:
        self.checked: Counter[str] = Counter()
        self.per_dataloader: Counter[tuple[str, int]] = Counter()
        for hook in _HOOKS:
            setattr(self, hook, self._checker(hook))

    def _checker(self, hook: str) -> Any:
        def check(trainer: pl.Trainer, *args: Any) -> None:
            self.check(trainer, hook, args)

        return check

    def check(self, trainer: pl.Trainer, hook: str, args: tuple[Any, ...]) -> None:
        view = get_progress(trainer)
        self.checked[hook] += 1
        if trainer.sanity_checking:
            assert view.validate.batches.lifetime == (0, 0, 0, 0), hook
            return
        if trainer.state.fn == TrainerFn.FITTING:
            fit = trainer.fit_loop
            batches = fit.epoch_loop.batch_progress
            assert view.global_step == trainer.global_step, hook
            assert view.epoch_index == trainer.current_epoch, hook
            assert tuple(view.train.epochs.run) == _phases(fit.epoch_progress.total), hook
            assert tuple(view.train.batches.run) == _phases(batches.total), hook
            if hook == "on_train_epoch_start":  # Lightning resets its epoch's batch counts only after this hook
                assert tuple(view.train.batches.epoch) == (0, 0, 0, 0) and view.batch_index == -1
            else:
                assert tuple(view.train.batches.epoch) == _phases(batches.current), hook
                assert view.batch_index == fit.epoch_loop.batch_idx, hook
        loop = {
            "validation": trainer.fit_loop.epoch_loop.val_loop
            if trainer.state.fn == TrainerFn.FITTING
            else trainer.validate_loop,
            "test": trainer.test_loop,
            "predict": trainer.predict_loop,
        }
        for name, stage in (("validation", view.validate), ("test", view.test), ("predict", view.predict)):
            if hook.startswith(f"on_{name}_batch"):
                assert tuple(stage.batches.epoch) == _phases(loop[name].batch_progress.current), hook
            if hook.startswith(f"on_{name}_batch_end"):
                dataloader = args[4] if len(args) == 5 else 0  # (module, outputs, batch, batch_idx[, dataloader_idx])
                self.per_dataloader[name, dataloader] += 1
                assert stage.dataloaders[dataloader].batches.epoch == self.per_dataloader[name, dataloader], hook
            if hook == f"on_{name}_epoch_start":
                self.per_dataloader = Counter({k: 0 for k in self.per_dataloader if k[0] != name})


def _fit(model: Recording | None = None, val: Any = None, **kwargs: Any) -> tuple[pl.Trainer, Agreement, Recording]:
    model = model or Recording()
    agreement = Agreement()
    fit = trainer([ProgressTracker(), agreement], **kwargs)
    fit.fit(model, loader(), val)
    return fit, agreement, model


def test_accumulation_window_that_does_not_divide_the_epoch_agrees_with_lightning() -> None:
    fit, agreement, _ = _fit(accumulate_grad_batches=3, max_epochs=3)
    view = get_progress(fit)
    assert view.global_step == fit.global_step == 6  # 4 batches: a window of 3, then 1 flushed at epoch end
    assert agreement.checked["on_before_optimizer_step"] == 6
    assert view.train.samples.run == 30


def test_manual_optimization_with_two_optimizers_agrees_with_lightning() -> None:
    fit, _, _ = _fit(Recording(manual=True))
    view = get_progress(fit)
    assert view.global_step == fit.global_step == 8 + 4
    assert [s.run for s in view.train.optimizer_steps_by_optimizer] == [8, 4]


@pytest.mark.parametrize("interval", [2, 0.5])
def test_validation_within_the_epoch_counts_per_dataloader(interval: float) -> None:
    fit, agreement, _ = _fit(val=[loader(7, 4), loader(5, 2)], val_check_interval=interval, num_sanity_val_steps=0)
    view = get_progress(fit)
    assert view.validate.epochs.run.completed == 4 == agreement.checked["on_validation_end"]
    assert [d.batches.run for d in view.validate.dataloaders] == [8, 12]
    assert [d.samples.run for d in view.validate.dataloaders] == [28, 20]


def test_limited_batches_agree_with_lightning() -> None:
    fit, _, _ = _fit(val=loader(), limit_train_batches=3, limit_val_batches=2)
    view = get_progress(fit)
    assert view.train.batches.run.completed == 6
    assert view.validate.batches.run.completed == 4


def test_max_steps_ending_mid_epoch_agrees_with_lightning() -> None:
    fit, _, _ = _fit(max_steps=6, max_epochs=-1)
    view = get_progress(fit)
    assert view.global_step == 6
    assert view.train.batches.run.completed == 6
    assert view.train.epochs.run.completed == 2 == fit.current_epoch  # the cut-short epoch counts, as in Lightning


def test_sanity_check_validation_is_not_counted() -> None:
    fit, agreement, _ = _fit(val=loader(), num_sanity_val_steps=2, max_epochs=1)
    assert agreement.checked["on_sanity_check_end"] == 1
    assert get_progress(fit).validate.epochs.lifetime.completed == 1


def test_a_batch_refused_by_on_train_batch_start_is_not_counted() -> None:
    model = Recording()
    model.stop_at = 2
    fit = trainer([ProgressTracker()], max_epochs=2)
    fit.fit(model, loader())
    view = get_progress(fit)
    assert view.train.batches.run.completed == len(model.seen) == 2 + 4
    assert view.train.epochs.run.completed == fit.current_epoch == 2
    assert view.global_step == fit.global_step == 6


def test_standalone_validate_test_and_predict_are_runs_of_their_own() -> None:
    callback = ProgressTracker()
    agreement = Agreement()
    fit = trainer([callback, agreement])
    model = Recording()
    fit.validate(model, [loader(), loader(5, 2)])
    fit.test(model, loader(7, 2))
    fit.predict(model, loader(4, 4))
    view = get_progress(fit)
    assert view.run.kind == "predict" and view.run.counts.completed == 3
    assert [d.batches.lifetime for d in view.validate.dataloaders] == [4, 3]
    assert view.test.samples.lifetime == 7
    assert view.predict.batches.run.completed == 1
    assert agreement.checked["on_test_batch_end"] == 4


def test_the_lightning_module_reads_the_same_progress() -> None:
    class Reading(Recording):
        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.read = get_progress(self.trainer).train.batches.run.processed

    model = Reading()
    _fit(model)
    assert model.read == 8
