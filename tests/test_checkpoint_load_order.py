"""A loaded loader part that does not fit the loader registered after the load (Lightning's and Ignite's
order): the load is undone, so the refusal leaves the progress, the global RNGs and the loaders armed by
that load as they were before it, with real Trainer/Engine/Accelerator runs (Accelerate: a loader that only
``train()`` tracks, after ``load_state``).

The checkpoints are tests/helpers/saved_checkpoints.py's (10 samples in batches of 3: 4 batches an
epoch); the resumed runs get batches of 2 (5 batches an epoch), which no saved position fits.
"""

from __future__ import annotations

import random
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("numpy")
pytest.importorskip("pytorch_lightning")
pytest.importorskip("ignite")
pytest.importorskip("accelerate")

import numpy as np
import pytorch_lightning as pl
import torch
from ignite.engine import Engine
from ignite.handlers import Checkpoint
from torch.utils.data import DataLoader, TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import ProgressStateError, Tracker
from tracker_core.integrations.ignite import ProgressHandler
from tracker_core.integrations.lightning import ProgressTracker

from helpers.saved_checkpoints import _Module, saved_checkpoints

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _loader(batch_size: int, shuffle: bool = False) -> DataLoader[Any]:
    x = torch.linspace(-1, 1, 40).reshape(10, 4)
    return DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=batch_size, shuffle=shuffle)


def _stateful_loader(batch_size: int, shuffle: bool = False) -> StatefulDataLoader[Any]:
    """The saved runs' loader kind (tests/helpers/saved_checkpoints.py), in batches of ``batch_size``: a load arms
    it with its saved position."""
    x = torch.linspace(-1, 1, 40).reshape(10, 4)
    return StatefulDataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=batch_size, shuffle=shuffle)


def _global_rngs() -> tuple[torch.Tensor, Any, Any]:
    return torch.get_rng_state(), random.getstate(), np.random.get_state()


def _same(a: tuple[torch.Tensor, Any, Any], b: tuple[torch.Tensor, Any, Any]) -> bool:
    numpy_same = all(np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y for x, y in zip(a[2], b[2]))
    return torch.equal(a[0], b[0]) and a[1] == b[1] and numpy_same


def test_lightning_fit_from_a_checkpoint_whose_loader_part_does_not_fit_the_loader_changes_no_progress_or_rng(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    checkpoint = saved_checkpoints(tmp_path_factory).lightning / "step=1.ckpt"  # mid-epoch
    callback = ProgressTracker()
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=2,
        accumulate_grad_batches=2,
        callbacks=[callback],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    module = _Module()
    before, rngs = callback.tracker.progress.state_dict(), _global_rngs()
    with pytest.raises(ProgressStateError, match="4 batches per epoch; this loader has 5") as raised:
        trainer.fit(module, _stateful_loader(batch_size=2), ckpt_path=str(checkpoint))
    assert raised.value.key == "train_loaders.0.batches_per_epoch"
    assert "the load was undone" in str(raised.value)
    assert callback.tracker.progress.state_dict() == before
    assert _same(_global_rngs(), rngs)


def test_ignite_run_after_loading_a_checkpoint_whose_loader_part_does_not_fit_changes_no_progress_or_rng(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    checkpoint = torch.load(saved_checkpoints(tmp_path_factory).ignite / "checkpoint_2.pt", weights_only=True)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = Engine(lambda engine, batch: None)
    handler = ProgressHandler()
    handler.attach(trainer, optimizers=[optimizer])
    before, rngs = handler._tracker.progress.state_dict(), _global_rngs()
    Checkpoint.load_objects(
        {"trainer": trainer, "model": model, "optimizer": optimizer, "progress": handler}, checkpoint
    )
    with pytest.raises(ProgressStateError, match="4 batches per epoch; this loader has 5") as raised:
        trainer.run(_stateful_loader(batch_size=2), max_epochs=2)
    assert raised.value.key == "train_loaders.0.batches_per_epoch"
    assert handler._tracker.progress.state_dict() == before
    assert _same(_global_rngs(), rngs)


def test_a_later_loader_that_does_not_fit_undoes_the_arming_of_the_loaders_registered_before_it() -> None:
    torch.manual_seed(0)
    saving = Tracker()
    loaders = [_stateful_loader(3, shuffle=True), _stateful_loader(3, shuffle=True)]
    for index, loader in enumerate(loaders):
        saving.track_train_loader(loader, index)
    progress = saving.progress
    progress.run_ready("fit")
    progress.run_started()
    progress.train.epoch_ready()
    progress.train.epoch_started()
    for batches in zip(*loaders):
        progress.train.batch_begin()
        progress.train.batch_end(len(batches[0][0]), 0)
        break
    entry = saving.state_dict()

    first = _stateful_loader(3, shuffle=True)
    loading = Tracker()
    loading.track_train_loader(first, 0)  # registered before the load: armed by it
    torch.manual_seed(1)
    before, rngs = loading.progress.state_dict(), _global_rngs()
    loading.load_state_dict(entry)
    with pytest.raises(ProgressStateError) as raised:
        loading.track_train_loader(_stateful_loader(2, shuffle=True), 1)  # registered after it: does not fit
    assert raised.value.key == "train_loaders.1.batches_per_epoch"
    assert loading.progress.state_dict() == before
    assert _same(_global_rngs(), rngs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(list(first)) == 4  # not armed to replay the loaded epoch: a whole epoch


def test_accelerate_a_loader_tracked_only_by_train_after_load_state_that_does_not_fit_changes_no_progress_or_rng(
    tmp_path: Path,
) -> None:
    """Without ``track_train_loader`` before ``load_state``, the loader part is checked when ``train()`` first
    tracks the loader: a mismatch undoes the load of the progress and the global RNGs."""
    from tracker_core.integrations.accelerate import AcceleratorProgress

    from helpers.accelerate_drive import Indexed, Setup, StopAt, fresh_accelerator, run

    run(Setup(), stop=StopAt(2), save_dir=str(tmp_path / "saved"))  # 10 samples in batches of 3
    accelerator = fresh_accelerator(Setup())
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, DataLoader(Indexed(10), batch_size=2))
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    torch.manual_seed(3)
    before, rngs = progress.view.state_dict(), _global_rngs()
    accelerator.load_state(str(tmp_path / "saved"))
    with progress.fit(3) as fit:
        for _epoch in fit.epochs():
            with pytest.raises(ProgressStateError, match="4 batches per epoch; this loader has 5") as raised:
                next(iter(progress.train(loader)))
            assert progress.view.state_dict() == before
            assert _same(_global_rngs(), rngs)
            break
    assert raised.value.key == "train_loaders.0.batches_per_epoch"
