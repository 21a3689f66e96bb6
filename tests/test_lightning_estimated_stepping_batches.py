"""A ``configure_optimizers`` that reads ``trainer.estimated_stepping_batches`` (OneCycleLR's ``total_steps``) makes
Lightning set up the train data and build its iterator inside strategy setup, before it restores its loops from
the checkpoint. A fit resumed from an epoch end of such a run (its last batch, where Lightning goes on with the next
epoch) trains exactly as the uninterrupted run: weights, sample ids, progress. Inside an epoch a plain ``DataLoader``
has no position: its checkpoints are warned at the save and at the resume, and Lightning reads the epoch from its
first batch, counting on as the uninterrupted run counts. A torchdata ``StatefulDataLoader`` resumes at its batch
from any checkpoint: Lightning restores its state only after that early build, so the adapter loads it there."""

from __future__ import annotations

import dataclasses
import importlib
import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")

import torch
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import InexactResumeWarning, comparable_state, get_progress
from tracker_core.checkpoints import read_checkpoint
from tracker_core.integrations.lightning import ProgressTracker

from helpers.lightning_matrix import PACKAGES
from helpers.lightning_program import Indexed

pytestmark = [
    pytest.mark.filterwarnings("ignore::UserWarning:pytorch_lightning"),
    pytest.mark.filterwarnings("ignore::UserWarning:lightning_fabric"),
    pytest.mark.filterwarnings("ignore::UserWarning:lightning"),
]

SAMPLES, BATCH, EPOCHS = 20, 4, 3
PER_EPOCH = SAMPLES // BATCH  # 5
STEPS = EPOCHS * PER_EPOCH
EPOCH_ENDS = [step for step in range(1, STEPS) if step % PER_EPOCH == 0]  # 5, 10
MID_EPOCH = [step for step in range(1, STEPS) if step % PER_EPOCH]


@dataclasses.dataclass
class Outcome:
    seen: list[list[int]]
    weights: list[torch.Tensor]
    progress: dict[str, Any]
    warned: list[str]  # InexactResumeWarning messages
    loader: DataLoader[Any]
    attributes: set[str]  # the loader's own attributes before the fit


def _module(package: str, one_cycle: bool = True) -> Any:
    """Its ``configure_optimizers`` reads ``estimated_stepping_batches``: for OneCycleLR's ``total_steps``, or (a run
    continued beyond its end, which OneCycleLR refuses) only to keep it in ``total_steps``."""
    pl = importlib.import_module(package)

    class OneCycle(pl.LightningModule):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
            self.seen: list[list[int]] = []

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y, ids = batch
            self.seen.append(ids.tolist())
            return torch.nn.functional.mse_loss(self.layer(x + 0.01 * torch.randn_like(x)), y)

        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            self.total_steps = total = self.trainer.estimated_stepping_batches
            if not one_cycle:
                return optimizer
            scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=total)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    torch.manual_seed(0)
    return OneCycle()


def _fit(
    package: str,
    folder: Path | None,
    ckpt_path: Path | None = None,
    one_cycle: bool = True,
    stateful: bool = False,
) -> Outcome:
    """A fit saving a checkpoint at every step into ``folder`` (None: saving none), from a shuffled plain
    ``DataLoader`` or (``stateful``) a ``StatefulDataLoader``."""
    pl = importlib.import_module(package)
    module = _module(package, one_cycle)
    callbacks: list[Any] = [ProgressTracker()]
    if folder is not None:
        callbacks.append(
            pl.callbacks.ModelCheckpoint(dirpath=folder, every_n_train_steps=1, save_top_k=-1, filename="{step}")
        )
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=EPOCHS,
        enable_progress_bar=False,
        logger=False,
        enable_model_summary=False,
        enable_checkpointing=folder is not None,
        callbacks=callbacks,
    )
    torch.manual_seed(1 if ckpt_path is None else 1234)  # a resume must not depend on the seed
    loader = (StatefulDataLoader if stateful else DataLoader)(Indexed(SAMPLES), batch_size=BATCH, shuffle=True)
    attributes = set(vars(loader))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, loader, ckpt_path=ckpt_path)
    warned = [str(w.message) for w in caught if issubclass(w.category, InexactResumeWarning)]
    weights = [p.detach().clone() for p in module.parameters()]
    return Outcome(module.seen, weights, get_progress(trainer).state_dict(), warned, loader, attributes)


_uninterrupted: dict[tuple[str, bool], tuple[Outcome, Path]] = {}


def _uninterrupted_run(package: str, factory: pytest.TempPathFactory, stateful: bool = False) -> tuple[Outcome, Path]:
    if (package, stateful) not in _uninterrupted:
        folder = factory.mktemp(f"uninterrupted-{package}-{stateful}")
        _uninterrupted[package, stateful] = _fit(package, folder, stateful=stateful), folder
    return _uninterrupted[package, stateful]


def _assert_trains_as(resumed: Outcome, reference: Outcome, step: int) -> None:
    assert resumed.seen == reference.seen[step:]
    assert all(torch.equal(a, b) for a, b in zip(resumed.weights, reference.weights, strict=True))
    assert comparable_state(resumed.progress) == comparable_state(reference.progress)  # anomalies included
    assert resumed.warned == []


@pytest.mark.parametrize("package", PACKAGES)
@pytest.mark.parametrize("step", EPOCH_ENDS)
def test_a_fit_resumed_from_an_epoch_end_checkpoint_trains_as_the_uninterrupted_run(
    package: str, step: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    reference, folder = _uninterrupted_run(package, tmp_path_factory)
    _assert_trains_as(_fit(package, None, ckpt_path=folder / f"step={step}.ckpt"), reference, step)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_mid_epoch_checkpoint_of_a_plain_loader_is_warned_at_its_save(
    package: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    reference, folder = _uninterrupted_run(package, tmp_path_factory)
    assert len(reference.warned) == len(MID_EPOCH)
    for message, step in zip(reference.warned, MID_EPOCH, strict=True):
        assert message.startswith(f"saving DataLoader over Indexed (0 workers) after {step % PER_EPOCH} batches")
        assert "StatefulDataLoader" in message
    assert read_checkpoint(folder / "step=1.ckpt").entries[0]["train_loaders"][0]["kind"] == "plain"


@pytest.mark.parametrize("package", PACKAGES)
@pytest.mark.parametrize("step", MID_EPOCH)
def test_a_plain_loader_resumed_inside_an_epoch_is_warned_and_lightning_reads_that_epoch_from_its_first_batch(
    package: str, step: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    reference, folder = _uninterrupted_run(package, tmp_path_factory)
    resumed = _fit(package, None, ckpt_path=folder / f"step={step}.ckpt")
    consumed = step % PER_EPOCH
    resuming = [message for message in resumed.warned if message.startswith("resuming DataLoader")]
    assert len(resuming) == 1 and f"after {consumed} batches of an epoch" in resuming[0]
    # Lightning runs the epoch's remaining batches from the start of a new order, and counts them on
    assert len(resumed.seen) == STEPS - step
    assert resumed.seen[: PER_EPOCH - consumed] != reference.seen[step : step - consumed + PER_EPOCH]
    assert comparable_state(resumed.progress) == comparable_state(reference.progress)
    assert set(vars(resumed.loader)) == resumed.attributes  # nothing installed on the loader
    assert "_get_iterator" not in vars(resumed.loader)


@pytest.mark.parametrize("package", PACKAGES[:1])
def test_a_plain_loader_resumed_inside_an_epoch_is_warned_only_as_such(
    package: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    _, folder = _uninterrupted_run(package, tmp_path_factory)
    resumed = _fit(package, None, ckpt_path=folder / "step=1.ckpt")
    assert [message.split(":")[0] for message in resumed.warned] == [
        "resuming DataLoader over Indexed (0 workers) after 1 batches of an epoch"
    ]


@pytest.mark.parametrize("package", PACKAGES)
@pytest.mark.parametrize("step", [*EPOCH_ENDS, *MID_EPOCH])
def test_a_fit_from_a_stateful_loader_resumed_from_any_checkpoint_trains_as_the_uninterrupted_run(
    package: str, step: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    reference, folder = _uninterrupted_run(package, tmp_path_factory, stateful=True)
    resumed = _fit(package, None, ckpt_path=folder / f"step={step}.ckpt", stateful=True)
    _assert_trains_as(resumed, reference, step)


@pytest.mark.parametrize("package", PACKAGES)
def test_a_finished_fit_continued_from_its_checkpoint_continues_its_run(package: str, tmp_path: Path) -> None:
    pl = importlib.import_module(package)

    def fit(epochs: int, ckpt_path: Path | None) -> Any:
        trainer = pl.Trainer(
            accelerator="cpu",
            devices=1,
            max_epochs=epochs,
            enable_progress_bar=False,
            logger=False,
            enable_model_summary=False,
            enable_checkpointing=False,
            callbacks=[ProgressTracker()],
        )
        loader = DataLoader(Indexed(SAMPLES), batch_size=BATCH, shuffle=True)
        trainer.fit(_module(package, one_cycle=False), loader, ckpt_path=ckpt_path)
        return trainer

    fit(EPOCHS, None).save_checkpoint(tmp_path / "finished.ckpt")
    continued = fit(EPOCHS + 1, tmp_path / "finished.ckpt")
    view = get_progress(continued)
    assert (view.global_step, view.epoch_index) == (continued.global_step, continued.current_epoch) == (STEPS + 5, 4)
    assert (view.run.counts.completed, view.anomalies) == (1, ())


@pytest.mark.parametrize("package", PACKAGES)
def test_a_checkpoint_at_an_epoch_end_of_a_fit_resumed_at_an_epoch_end_warns_that_lightning_runs_an_epoch_again(
    package: str, tmp_path: Path
) -> None:
    """Lightning's counters of a fit resumed at an epoch end show no epoch in flight at the next epoch's last batch:
    resumed from there, Lightning runs that epoch again. The record follows it, without raising, and says so."""
    _fit(package, tmp_path / "first", one_cycle=False)  # OneCycleLR refuses Lightning's extra epoch
    _fit(package, tmp_path / "second", tmp_path / "first" / "step=5.ckpt", one_cycle=False)  # epoch 0's last batch
    third = _fit(package, tmp_path / "third", tmp_path / "second" / "step=10.ckpt", one_cycle=False)  # epoch 1's
    assert any("runs the next one as epoch 1 again" in message for message in third.warned), third.warned
    assert len(third.seen) == 2 * STEPS // EPOCHS  # Lightning runs epochs "1" and 2: 10 batches
    train = third.progress["stages"]["train"]
    assert train["batches"]["lifetime"]["completed"] == 10 + len(third.seen)
    assert third.progress["anomalies"] == ["Lightning runs train epoch 1 (0-based) again after a resume"]


@pytest.mark.parametrize("package", PACKAGES)
def test_a_mid_epoch_checkpoint_of_a_fit_resumed_at_an_epoch_end_warns_that_lightning_renumbers_its_batches(
    package: str, tmp_path: Path
) -> None:
    """Mid-epoch, Lightning numbers the remaining batches of such a checkpoint from batch_idx 0, so it runs that
    epoch whole; a plain loader reads it from its first batch (warned as such), counted on from the checkpoint."""
    _fit(package, tmp_path / "first", one_cycle=False)
    _fit(package, tmp_path / "second", tmp_path / "first" / "step=5.ckpt", one_cycle=False)  # epoch 0's last batch
    third = _fit(package, None, tmp_path / "second" / "step=7.ckpt", one_cycle=False)  # 2 batches into epoch 1
    assert any("numbers the epoch's remaining batches from batch_idx 0" in message for message in third.warned)
    assert any(message.startswith("resuming DataLoader over Indexed") for message in third.warned)
    assert len(third.seen) == 2 * PER_EPOCH  # Lightning runs epochs 1 (whole) and 2
    assert third.progress["stages"]["train"]["batches"]["lifetime"]["completed"] == 7 + len(third.seen)
    assert third.progress["anomalies"] == ["Lightning numbers train epoch 1's resumed batches from 0"]


@pytest.mark.parametrize("package", PACKAGES[:1])
@pytest.mark.parametrize("step", [EPOCH_ENDS[0], MID_EPOCH[0]])
def test_loader_states_that_do_not_fit_the_train_loaders_are_noted_and_training_goes_on(
    package: str, step: int, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """Two loader states saved in Lightning's loops for the one StatefulDataLoader of the resumed fit: the adapter,
    which loads them itself in this early setup, inside Lightning's hook, loads none and notes it; the fit trains on."""
    _, folder = _uninterrupted_run(package, tmp_path_factory, stateful=True)
    checkpoint = torch.load(folder / f"step={step}.ckpt", weights_only=False)
    states = checkpoint["loops"]["fit_loop"]["state_dict"]["combined_loader"]
    checkpoint["loops"]["fit_loop"]["state_dict"]["combined_loader"] = states * 2
    torch.save(checkpoint, tmp_path / "two_states.ckpt")
    resumed = _fit(package, None, ckpt_path=tmp_path / "two_states.ckpt", stateful=True)
    assert len(resumed.seen) == STEPS - step
    assert any("the checkpoint 2 states: none loaded" in anomaly for anomaly in resumed.progress["anomalies"])
