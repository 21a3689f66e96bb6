"""A lifetime that lives in the model, through each adapter: weights-only files carry it into a new run.

Each program trains a tracked network (``track_lifetime``) with a real framework, saves only its
weights the framework's way, and a fresh tracked network loaded from them continues the lifetime
in a new run of the same or another framework, with no ``lifetime_from``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("ignite")
pytest.importorskip("accelerate")
pytest.importorskip("safetensors")

import pytorch_lightning as pl
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from ignite.engine import Events, create_supervised_evaluator, create_supervised_trainer
from ignite.handlers import Checkpoint
from pytorch_lightning.callbacks import ModelCheckpoint
from safetensors.torch import load_file
from torch.utils.data import DataLoader, TensorDataset

from tracker_core import ProgressStateError, ProgressView, get_progress, track_lifetime, without_lifetime
from tracker_core.integrations.accelerate import AcceleratorProgress
from tracker_core.integrations.ignite import ProgressHandler
from tracker_core.integrations.lightning import ProgressTracker

SAMPLES, BATCH = 6, 2  # 3 batches per epoch


def _loader() -> DataLoader[tuple[torch.Tensor, ...]]:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(SAMPLES, 4, generator=g), torch.randn(SAMPLES, 1, generator=g)), BATCH)


def _network(tracked: bool = True) -> torch.nn.Module:
    network = torch.nn.Sequential(torch.nn.Linear(4, 1))
    if tracked:
        track_lifetime(network)
    return network


class Regression(pl.LightningModule):
    """The network trained by Lightning; the network, not the LightningModule, carries the lifetime."""

    def __init__(self, tracked: bool = True) -> None:
        super().__init__()
        self.net = _network(tracked)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        pass

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class Untracked(Regression):
    def __init__(self) -> None:
        super().__init__(tracked=False)


def _trainer(epochs: int, *callbacks: pl.Callback) -> pl.Trainer:
    return pl.Trainer(
        max_epochs=epochs,
        callbacks=[ProgressTracker(), *callbacks],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        enable_checkpointing=any(isinstance(callback, ModelCheckpoint) for callback in callbacks),
        accelerator="cpu",
    )


def _lightning(network: torch.nn.Module, epochs: int, *callbacks: pl.Callback) -> ProgressView:
    module = Regression()
    module.net = network
    trainer = _trainer(epochs, *callbacks)
    trainer.fit(module, _loader())
    return get_progress(trainer)


def _ignite(network: torch.nn.Module, epochs: int) -> ProgressView:
    optimizer = torch.optim.SGD(network.parameters(), lr=0.1)
    trainer = create_supervised_trainer(network, optimizer, torch.nn.functional.mse_loss)
    handler = ProgressHandler()
    handler.attach(trainer, optimizers=[optimizer], model=network)
    trainer.run(_loader(), max_epochs=epochs)
    return handler.view


def _accelerator() -> Accelerator:
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    return Accelerator(cpu=True)


def _accelerate(network: torch.nn.Module, epochs: int, accelerator: Accelerator | None = None) -> ProgressView:
    accelerator = accelerator or _accelerator()
    optimizer = torch.optim.SGD(network.parameters(), lr=0.1)
    prepared, optimizer, loader = accelerator.prepare(network, optimizer, _loader())
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    with progress.fit(epochs) as fit:
        for _ in fit.epochs():
            for x, y in progress.train(loader):
                accelerator.backward(torch.nn.functional.mse_loss(prepared(x), y))
                optimizer.step()
                optimizer.zero_grad()
    return progress.view


def _loaded(weights: dict[str, torch.Tensor]) -> torch.nn.Module:
    network = _network()
    network.load_state_dict(weights)
    return network


def _assert_lifetime(view: ProgressView, epochs: int, run_epochs: int) -> None:
    assert view.train.epochs.lifetime.completed == epochs
    assert view.train.batches.lifetime.completed == epochs * SAMPLES // BATCH
    assert view.train.samples.lifetime == epochs * SAMPLES
    assert view.train.epochs.run.completed == run_epochs


def test_lightning_weights_only_checkpoint_carries_the_lifetime_into_a_new_fit(tmp_path: Path) -> None:
    _lightning(_network(), 2, ModelCheckpoint(dirpath=tmp_path, filename="weights", save_weights_only=True))

    module = Regression.load_from_checkpoint(tmp_path / "weights.ckpt")
    trainer = _trainer(3)
    trainer.fit(module, _loader())

    _assert_lifetime(get_progress(trainer), epochs=5, run_epochs=3)


def test_lightning_validate_of_loaded_weights_sees_their_lifetime(tmp_path: Path) -> None:
    first = _network()
    _lightning(first, 2)
    torch.save(first.state_dict(), tmp_path / "net.pt")
    module = Regression()
    module.net.load_state_dict(torch.load(tmp_path / "net.pt", weights_only=True))
    trainer = _trainer(1)

    trainer.validate(module, _loader(), verbose=False)

    view = get_progress(trainer)
    assert view.train.epochs.lifetime.completed == 2
    assert view.validate.batches.run.completed == SAMPLES // BATCH


def test_ignite_torch_saved_weights_carry_the_lifetime_into_a_new_run(tmp_path: Path) -> None:
    first = _network()
    _ignite(first, 2)
    torch.save(first.state_dict(), tmp_path / "net.pt")

    view = _ignite(_loaded(torch.load(tmp_path / "net.pt", weights_only=True)), 3)

    _assert_lifetime(view, epochs=5, run_epochs=3)


def test_ignite_evaluator_given_the_model_sees_its_lifetime() -> None:
    first = _network()
    _ignite(first, 2)
    network = _loaded(first.state_dict())
    handler = ProgressHandler()
    evaluator = create_supervised_evaluator(network)
    handler.attach(evaluator, stage="validate", model=network)

    evaluator.run(_loader())

    assert handler.view.train.epochs.lifetime.completed == 2
    assert handler.view.validate.batches.run.completed == SAMPLES // BATCH


def test_accelerate_save_model_carries_the_lifetime_into_a_new_run(tmp_path: Path) -> None:
    first = _network()
    accelerator = _accelerator()
    _accelerate(first, 2, accelerator)
    accelerator.save_model(first, tmp_path)  # safetensors

    view = _accelerate(_loaded(load_file(str(tmp_path / "model.safetensors"))), 3)

    _assert_lifetime(view, epochs=5, run_epochs=3)


def test_the_lifetime_goes_on_across_lightning_ignite_and_accelerate(tmp_path: Path) -> None:
    network = _network()
    _lightning(network, 2)
    torch.save(network.state_dict(), tmp_path / "net.pt")
    network = _loaded(torch.load(tmp_path / "net.pt", weights_only=True))
    _ignite(network, 1)
    torch.save(network.state_dict(), tmp_path / "net.pt")

    view = _accelerate(_loaded(torch.load(tmp_path / "net.pt", weights_only=True)), 1)

    _assert_lifetime(view, epochs=4, run_epochs=1)
    assert view.run.counts.completed == 3


def test_a_full_checkpoint_resume_is_not_counted_twice(tmp_path: Path) -> None:
    _lightning(_network(), 2, ModelCheckpoint(dirpath=tmp_path, filename="full"))
    module = Regression()
    trainer = _trainer(3)

    trainer.fit(module, _loader(), ckpt_path=tmp_path / "full.ckpt")

    _assert_lifetime(get_progress(trainer), epochs=3, run_epochs=3)


def test_an_untracked_lightning_module_names_the_lifetime_key_when_strictly_loading(tmp_path: Path) -> None:
    _lightning(_network(), 1, ModelCheckpoint(dirpath=tmp_path, filename="weights", save_weights_only=True))

    with pytest.raises(RuntimeError, match=r'Unexpected key\(s\) in state_dict: "net.tracker_core_lifetime"'):
        Untracked.load_from_checkpoint(tmp_path / "weights.ckpt")


def test_an_untracked_model_loads_tracked_weights_with_without_lifetime(tmp_path: Path) -> None:
    _lightning(_network(), 1, ModelCheckpoint(dirpath=tmp_path, filename="weights", save_weights_only=True))
    weights = torch.load(tmp_path / "weights.ckpt", weights_only=True)["state_dict"]
    module = Untracked()

    module.load_state_dict(without_lifetime(weights))

    assert torch.equal(module.net[0].weight, weights["net.0.weight"])


def test_an_untracked_lightning_module_loads_tracked_weights_without_strict(tmp_path: Path) -> None:
    _lightning(_network(), 1, ModelCheckpoint(dirpath=tmp_path, filename="weights", save_weights_only=True))

    module = Untracked.load_from_checkpoint(tmp_path / "weights.ckpt", strict=False)

    assert "net.tracker_core_lifetime" not in module.state_dict()


def _accelerate_3_epochs(state: Path, save_after: int | None) -> ProgressView:
    """A tracked network 3 epochs, resumed from ``state``; or ``save_state`` into it after epoch ``save_after`` and stop."""
    accelerator = _accelerator()
    network = _network()
    optimizer = torch.optim.SGD(network.parameters(), lr=0.1)
    prepared, optimizer, loader = accelerator.prepare(network, optimizer, _loader())
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    if save_after is None:
        accelerator.load_state(str(state))
    with progress.fit(3) as fit:
        for epoch in fit.epochs():
            for x, y in progress.train(loader):
                accelerator.backward(torch.nn.functional.mse_loss(prepared(x), y))
                optimizer.step()
                optimizer.zero_grad()
            if epoch == save_after:
                accelerator.save_state(str(state))
                break
    return progress.view


def test_accelerate_load_state_of_a_tracked_model_counts_each_epoch_once(tmp_path: Path) -> None:
    _accelerate_3_epochs(tmp_path / "state", save_after=0)

    view = _accelerate_3_epochs(tmp_path / "state", save_after=None)

    _assert_lifetime(view, epochs=3, run_epochs=3)


def test_ignite_load_objects_of_a_tracked_model_counts_each_epoch_once(tmp_path: Path) -> None:
    def three_epochs(resume: bool) -> ProgressView:
        network = _network()
        optimizer = torch.optim.SGD(network.parameters(), lr=0.1)
        trainer = create_supervised_trainer(network, optimizer, torch.nn.functional.mse_loss)
        handler = ProgressHandler()
        handler.attach(trainer, optimizers=[optimizer], model=network)
        to_save = {"trainer": trainer, "model": network, "optimizer": optimizer, "progress": handler}
        if resume:
            Checkpoint.load_objects(to_save, str(next(tmp_path.glob("*.pt"))))
        else:
            trainer.add_event_handler(Events.EPOCH_COMPLETED(once=1), Checkpoint(to_save, str(tmp_path)))
            trainer.add_event_handler(Events.EPOCH_COMPLETED(once=1), lambda engine: engine.terminate())
        trainer.run(_loader(), max_epochs=3)
        return handler.view

    three_epochs(resume=False)

    _assert_lifetime(three_epochs(resume=True), epochs=3, run_epochs=3)


def test_a_damaged_lifetime_buffer_stops_a_lightning_fit_before_any_batch_naming_the_buffer() -> None:
    module = Regression()
    module.net.load_state_dict(
        {**module.net.state_dict(), "tracker_core_lifetime": torch.tensor([1, 2], dtype=torch.uint8)}
    )
    weights = module.net[0].weight.detach().clone()

    with pytest.raises(ProgressStateError, match="tracker_core_lifetime"):
        _trainer(1).fit(module, _loader())
    assert torch.equal(module.net[0].weight, weights)
