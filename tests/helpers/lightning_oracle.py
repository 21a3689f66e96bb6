"""The Lightning oracle: a callback that compares the tracker's view with Lightning's own counters at every hook.

Register it after the ``ProgressTracker``. It never raises inside a hook (an assertion would change
the run it checks): each disagreement is collected in ``disagreements`` as ``"hook: what"``.

What it compares (Lightning's counter on the right):

* while fitting: ``view.global_step == trainer.global_step``, ``view.epoch_index ==
  trainer.current_epoch``, the train epoch's batch phases ``view.train.batches.epoch ==
  fit_loop.epoch_loop.batch_progress.current`` and ``view.batch_index == fit_loop.batch_idx`` (not
  at ``on_train_epoch_start``: Lightning resets its epoch counts after that hook; in a fit resumed from a
  checkpoint Lightning may begin an epoch with the previous epoch's batch counts: compared from there), the run's
  processed/completed batches and epochs against the loops' totals;
* in validation/test/predict: the epoch's batch phases against that loop's ``batch_progress.current``,
  and per dataloader ``view.<stage>.dataloaders[i].batches.epoch == batch_idx + 1`` at each batch end;
* during the sanity check: nothing of it is counted.

A fit whose counters Lightning carries on from an earlier fit that the record did not count as its
last run is allowed an offset, only if the record noted that anomaly.
"""

from __future__ import annotations

import importlib
from typing import Any

from tracker_core import get_progress

HOOKS = (
    "on_fit_start", "on_train_start", "on_train_epoch_start", "on_train_batch_start", "on_before_backward",
    "on_after_backward", "on_before_optimizer_step", "on_before_zero_grad", "on_train_batch_end",
    "on_train_epoch_end", "on_validation_start", "on_validation_epoch_start", "on_validation_batch_start",
    "on_validation_batch_end", "on_validation_epoch_end", "on_validation_end", "on_train_end", "on_fit_end",
    "on_sanity_check_start", "on_sanity_check_end", "on_test_start", "on_test_epoch_start", "on_test_batch_start",
    "on_test_batch_end", "on_test_epoch_end", "on_test_end", "on_predict_start", "on_predict_epoch_start",
    "on_predict_batch_start", "on_predict_batch_end", "on_predict_epoch_end", "on_predict_end",
)  # fmt: skip

# Anomalies the record may note; any other one (e.g. a hook that met an unexpected order) is a disagreement.
EXPECTED_ANOMALIES = (
    " cut: ",
    "checkpoint saved during a validation",
    "resumed inside a validation batch",
    "this fit continues Lightning's counters",
)


def _bases() -> tuple[type, ...]:
    found = []
    for package in ("pytorch_lightning", "lightning.pytorch"):
        try:
            found.append(importlib.import_module(package).Callback)
        except ImportError:
            continue
    return tuple(found)


def _phases(counts: Any) -> tuple[int, int, int, int]:
    return (counts.ready, counts.started, counts.processed, counts.completed)


class Oracle(*_bases()):  # type: ignore[misc]
    """Collects every disagreement between the tracker's view and Lightning's counters (see the module)."""

    def __init__(self) -> None:
        self.disagreements: list[str] = []
        self.checked = 0
        self.calls: dict[str, int] = {}
        self._offset = (0, 0, 0)  # global_step, epoch, batches: allowed after a noted anomaly only
        self._train_started = False
        self._before_sanity: Any = None
        self._carried: dict[int, int] = {}
        self._first_index: dict[int, int] = {}  # the first batch_idx of each dataloader in this evaluation epoch
        self._epoch_offset = 0  # Lightning's epoch batch counts ahead of the record's, after a noted anomaly  # batches of a restored evaluation epoch Lightning finishes
        for hook in HOOKS:
            setattr(self, hook, self._checker(hook))

    def _checker(self, hook: str) -> Any:
        def check(trainer: Any, *args: Any) -> None:
            self.calls[hook] = self.calls.get(hook, 0) + 1
            try:
                self.check(trainer, hook, args)
            except Exception as error:  # an oracle that crashes is a disagreement too
                self.disagreements.append(f"{hook}: oracle failed: {error!r}")

        return check

    def _expect(self, hook: str, what: str, mine: object, lightning: object) -> None:
        self.checked += 1
        if mine != lightning:
            self.disagreements.append(f"{hook}: {what}: view {mine} != Lightning {lightning}")

    def check(self, trainer: Any, hook: str, args: tuple[Any, ...]) -> None:
        view = get_progress(trainer)
        if hook == "on_fit_start":
            self.check_anomalies(view)
            self._train_started = False
        if hook == "on_sanity_check_start":
            self._before_sanity = view.validate.batches.lifetime
        if hook == "on_sanity_check_end":
            self._expect(
                hook, "validate batches after the sanity check", view.validate.batches.lifetime, self._before_sanity
            )
        if trainer.sanity_checking:
            return
        fn = str(getattr(trainer.state.fn, "value", trainer.state.fn))
        if fn == "fit":
            self._check_fit(trainer, view, hook)
        stage = next((s for s in ("validation", "test", "predict") if hook.startswith(f"on_{s}_")), None)
        if stage is not None and hook == f"on_{stage}_epoch_start":
            # a validation a checkpoint cut inside a batch goes on from the batches done: at the cut batch
            # (the tracker points Lightning's iterator there) or, where it cannot, Lightning re-reads the data
            # from the start (batch_idx from 0)
            counts = view.stage({"validation": "validate"}.get(stage, stage)).dataloaders
            self._carried = {d: c.batches.epoch for d, c in enumerate(counts)}
            self._first_index = {}
        if stage is not None and "_batch_" in hook:
            self._check_evaluation(trainer, view, hook, stage, fn, args)

    def _check_fit(self, trainer: Any, view: Any, hook: str) -> None:
        fit = trainer.fit_loop
        if hook == "on_fit_start":
            return  # Lightning restores its loops from a checkpoint after this hook
        if hook == "on_train_start":
            self._train_started = True
        if hook == "on_train_start" or (hook == "on_fit_end" and not self._train_started):
            self._offset = self._offset_now(trainer, view)
        step_offset, epoch_offset, batch_offset = self._offset
        self._expect(hook, "global_step", view.global_step + step_offset, trainer.global_step)
        self._expect(hook, "epoch_index", view.epoch_index + epoch_offset, trainer.current_epoch)
        total = fit.epoch_loop.batch_progress.total
        run = view.train.batches.run
        self._expect(hook, "run batches processed", run.processed + batch_offset, total.processed)
        if hook.startswith("on_train_batch") or hook == "on_train_epoch_end":
            # elsewhere a batch restored from a checkpoint saved in on_train_batch_end may be processed and
            # never completed in Lightning's totals (it completes it only when it trains on)
            self._expect(hook, "run batches completed", run.completed + batch_offset, total.completed)
        if hook in ("on_train_epoch_start", "on_fit_start", "on_fit_end", "on_train_start", "on_train_end"):
            return
        if hook.startswith("on_validation"):
            return  # Lightning's train batch counts stay as they were: compared at the train hooks
        current = fit.epoch_loop.batch_progress.current
        if hook == "on_train_epoch_end" and view.train.batches.epoch.ready == 0 and trainer.ckpt_path is not None:
            # Resumed from a checkpoint at the end of an epoch's last batch whose validation ended the run
            # (max_steps), Lightning runs the next epoch without a batch, keeping the restored epoch's counts
            self._epoch_offset = current.ready
        if hook == "on_train_batch_start" and view.train.batches.epoch.ready == 1:
            # After a resume from a checkpoint at an epoch's last batch (or of a fit max_steps ended), Lightning
            # may begin the next epoch with that epoch's batch counts (batch_idx not from 0); the record counts
            # the new epoch from 0. Allowed only in a fit resumed from a checkpoint.
            self._epoch_offset = current.ready - 1
            if self._epoch_offset and trainer.ckpt_path is None:
                self.disagreements.append(f"{hook}: Lightning's epoch counts ahead by {self._epoch_offset}")
        offset = self._epoch_offset
        self._expect(hook, "epoch batches", tuple(c + offset for c in view.train.batches.epoch), _phases(current))
        self._expect(hook, "batch_index", view.batch_index + offset, fit.epoch_loop.batch_idx)

    def _offset_now(self, trainer: Any, view: Any) -> tuple[int, int, int]:
        offset = (
            trainer.global_step - view.global_step,
            trainer.current_epoch - view.epoch_index,
            trainer.fit_loop.epoch_loop.batch_progress.total.processed - view.train.batches.run.processed,
        )
        if offset != (0, 0, 0) and not any("this fit continues" in a for a in view.anomalies):
            self.disagreements.append(f"fit start: run scope off by {offset} with no anomaly noted")
        return offset

    def _check_evaluation(self, trainer: Any, view: Any, hook: str, stage: str, fn: str, args: tuple[Any, ...]) -> None:
        name = {"validation": "validate", "test": "test", "predict": "predict"}[stage]
        if stage == "validation":
            loop = trainer.fit_loop.epoch_loop.val_loop if fn == "fit" else trainer.validate_loop
        else:
            loop = getattr(trainer, f"{stage}_loop")
        counts = view.stage(name)
        self._expect(hook, f"{name} epoch batches", tuple(counts.batches.epoch), _phases(loop.batch_progress.current))
        if hook == f"on_{stage}_batch_end":
            # (module, outputs, batch, batch_idx[, dataloader_idx])
            batch_idx = args[3]
            dataloader = args[4] if len(args) == 5 else 0
            per_loader = counts.dataloaders[dataloader].batches.epoch if dataloader < len(counts.dataloaders) else 0
            first = self._first_index.setdefault(dataloader, batch_idx)
            carried = self._carried.get(dataloader, 0)
            expected = batch_idx + 1 + (carried if first != carried else 0)
            self._expect(hook, f"{name} dataloader {dataloader} epoch batches", per_loader, expected)

    def check_anomalies(self, view: Any) -> None:
        """Every anomaly the record noted is one the adapter may note (not a hook that met an unexpected order)."""
        for anomaly in view.anomalies:
            if not any(kind in anomaly for kind in EXPECTED_ANOMALIES):
                message = f"unexpected anomaly: {anomaly}"
                if message not in self.disagreements:
                    self.disagreements.append(message)
