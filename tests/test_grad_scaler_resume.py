"""An AMP GradScaler under gradient accumulation survives a mid-window resume.

The scale and growth tracker come back from the framework's own checkpoint (Ignite: the scaler
in ``to_save``; Lightning: its precision plugin's entry), the partial gradients (scaled by that
scale) from the tracker's; so the next optimizer step, and every one after, is the
uninterrupted run's. On the CPU: ``torch.amp.GradScaler("cpu")`` with a growth interval of 2, so
the scale grows during the run. Accelerate has no CPU scaler (``mixed_precision="fp16"`` needs
a GPU; on the CPU it is bf16, which uses none): not tested here.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("ignite")
pytest.importorskip("torchdata")

import pytorch_lightning as pl
import torch
from ignite.engine import Engine, Events, supervised_training_step_amp
from ignite.handlers import Checkpoint, DiskSaver
from pytorch_lightning.plugins import MixedPrecision
from torch.utils.data import TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import get_progress
from tracker_core.integrations.ignite import ProgressHandler
from tracker_core.integrations.lightning import ProgressTracker

ACCUMULATION, EPOCHS = 2, 2
STOP_AFTER = 3  # train batches: inside the second accumulation window of epoch 0 (4 batches an epoch)


def _loader() -> StatefulDataLoader[tuple[torch.Tensor, ...]]:
    """A loader with a position of its own, so the resumed epoch continues at its batch (the framework restores it)."""
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g))
    return StatefulDataLoader(data, batch_size=2)


def _network() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(4, 1)


def _scaler() -> torch.amp.GradScaler:
    return torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=2)


class Stopped(Exception):
    pass


# Ignite -----------------------------------------------------------------------------------------
def _ignite(folder: Path, stop: bool = False, resume: bool = False) -> tuple[torch.nn.Module, torch.amp.GradScaler]:
    network = _network()
    optimizer = torch.optim.SGD(network.parameters(), lr=0.1, momentum=0.9)
    scaler = _scaler()
    step = supervised_training_step_amp(
        network,
        optimizer,
        torch.nn.functional.mse_loss,
        device="cpu",
        scaler=scaler,
        gradient_accumulation_steps=ACCUMULATION,
    )
    trainer = Engine(step)
    progress = ProgressHandler()
    progress.attach(trainer, optimizers=[optimizer], scaler=scaler)
    to_save = {"trainer": trainer, "model": network, "optimizer": optimizer, "scaler": scaler, "progress": progress}
    if stop:
        saver = Checkpoint(to_save, DiskSaver(str(folder), require_empty=False), filename_prefix="stop")
        trainer.add_event_handler(Events.ITERATION_COMPLETED(once=STOP_AFTER), saver)
        trainer.add_event_handler(Events.ITERATION_COMPLETED(once=STOP_AFTER), lambda engine: engine.terminate())
    if resume:
        (saved,) = folder.glob("stop_*.pt")
        Checkpoint.load_objects(to_save, str(saved))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "User provided device_type of 'cuda'")  # Ignite's autocast("cuda") on a CPU
        trainer.run(_loader(), max_epochs=EPOCHS)
    return network, scaler


def test_ignite_scaler_state_and_the_steps_after_a_mid_window_resume_are_the_uninterrupted_runs(
    tmp_path: Path,
) -> None:
    expected_network, expected_scaler = _ignite(tmp_path)
    _, stopped_scaler = _ignite(tmp_path, stop=True)

    network, scaler = _ignite(tmp_path, resume=True)

    assert stopped_scaler.get_scale() < expected_scaler.get_scale()  # the scale grew after the stop
    assert scaler.state_dict() == expected_scaler.state_dict()
    assert torch.equal(network.weight, expected_network.weight)
    assert torch.equal(network.bias, expected_network.bias)


# Lightning --------------------------------------------------------------------------------------
class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = _network()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x).float(), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


class StopAfter(pl.Callback):
    def __init__(self, path: Path) -> None:
        self.path = path
        self.batches = 0

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self.batches += 1
        if self.batches == STOP_AFTER:
            trainer.save_checkpoint(self.path)
            raise Stopped


def _lightning(path: Path, stop: bool = False, resume: bool = False) -> tuple[Regression, torch.amp.GradScaler]:
    module = Regression()
    scaler = _scaler()
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=EPOCHS,
        accumulate_grad_batches=ACCUMULATION,
        plugins=[MixedPrecision("16-mixed", "cpu", scaler)],
        callbacks=[ProgressTracker(), *([StopAfter(path)] if stop else [])],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    try:
        trainer.fit(module, _loader(), ckpt_path=path if resume else None, weights_only=True)
    except Stopped:
        pass
    else:
        assert get_progress(trainer).train.epochs.run.completed == EPOCHS
    return module, scaler


def test_lightning_scaler_state_and_the_steps_after_a_mid_window_resume_are_the_uninterrupted_runs(
    tmp_path: Path,
) -> None:
    path = tmp_path / "stop.ckpt"
    expected_module, expected_scaler = _lightning(path)
    _, stopped_scaler = _lightning(path, stop=True)

    module, scaler = _lightning(path, resume=True)

    assert stopped_scaler.get_scale() < expected_scaler.get_scale()
    assert scaler.state_dict() == expected_scaler.state_dict()
    assert torch.equal(module.net.weight, expected_module.net.weight)
    assert torch.equal(module.net.bias, expected_module.net.bias)
