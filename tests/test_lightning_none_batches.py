"""A train loader that yields None for some batches (a ``collate_fn`` dropping a bad batch): Lightning marks such a
batch ready and processed without its start hook or a step, and runs its end hooks. The record counts it as a batch
of no samples, without an anomaly, so a fit resumed from any of its checkpoints trains as the uninterrupted one."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")

import pytorch_lightning as pl
import torch
from torch.utils.data import default_collate
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import InexactResumeWarning, comparable_state, get_progress
from tracker_core.integrations.lightning import ProgressTracker

from helpers.lightning_program import Indexed, Recording, trainer

pytestmark = [
    pytest.mark.filterwarnings("ignore:train_dataloader yielded None"),
    pytest.mark.filterwarnings("ignore::UserWarning:pytorch_lightning"),
    pytest.mark.filterwarnings("ignore::UserWarning:lightning_fabric"),
]

DROPPED = (0, 5)  # a batch holding one of these samples is None: 2 of the 6 batches of 2 in each epoch
STEPS = 8  # 2 epochs of 4 batches that train


def _none_for_dropped(samples: list[Any]) -> Any:
    return None if any(sample[2] in DROPPED for sample in samples) else default_collate(samples)


def _loader() -> StatefulDataLoader[Any]:
    """With a state of its own: a mid-epoch checkpoint resumes it at its batch."""
    return StatefulDataLoader(Indexed(12), batch_size=2, shuffle=True, collate_fn=_none_for_dropped)


class _PlainSgd(Recording):
    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _fit(callbacks: list[pl.Callback], ckpt_path: Path | None = None) -> tuple[_PlainSgd, pl.Trainer, list[str]]:
    torch.manual_seed(0)
    module = _PlainSgd()
    fit = trainer([ProgressTracker(), *callbacks], enable_checkpointing=bool(callbacks))
    torch.manual_seed(1 if ckpt_path is None else 1234)  # a resume must not depend on the seed
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fit.fit(module, _loader(), ckpt_path=ckpt_path)
    said = [str(w.message) for w in caught if issubclass(w.category, (InexactResumeWarning, RuntimeWarning))]
    return module, fit, said


def test_a_batch_the_loader_yields_as_none_counts_as_a_batch_of_no_samples_without_an_anomaly() -> None:
    module, fit, said = _fit([])
    view = get_progress(fit)
    assert said == [] and view.anomalies == ()
    assert len(module.seen) == STEPS
    assert tuple(view.train.batches.run) == (12, 12, 12, 12)  # every batch Lightning fetched
    assert view.train.samples.run == sum(len(ids) for ids in module.seen)
    assert view.global_step == fit.global_step == STEPS


def test_a_fit_resumed_from_any_checkpoint_trains_as_the_uninterrupted_run(tmp_path: Path) -> None:
    saver = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1, filename="{step}")
    reference, whole, _ = _fit([saver])
    for step in range(1, STEPS):
        module, fit, said = _fit([], ckpt_path=tmp_path / f"step={step}.ckpt")
        assert module.seen == reference.seen[step:], step
        assert all(torch.equal(a, b) for a, b in zip(module.parameters(), reference.parameters(), strict=True)), step
        assert comparable_state(get_progress(fit).state_dict()) == comparable_state(get_progress(whole).state_dict())
        assert said == [], step
