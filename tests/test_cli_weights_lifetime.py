"""``progress-tracker inspect`` of weights only: the lifetime a tracked model (``track_lifetime``) carries.

A tracked network is trained by a real framework (3 batches an epoch), then only its weights are
saved, each framework's way or with torch/safetensors; ``inspect`` shows the lifetime they carry.
"""

from __future__ import annotations

import json
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
from ignite.engine import create_supervised_trainer
from pytorch_lightning.callbacks import ModelCheckpoint
from safetensors.torch import save_file
from torch.utils.data import DataLoader, TensorDataset

from tracker_core import track_lifetime
from tracker_core.cli import main
from tracker_core.integrations.accelerate import AcceleratorProgress
from tracker_core.integrations.ignite import ProgressHandler
from tracker_core.integrations.lightning import ProgressTracker

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning:pytorch_lightning", "ignore:'set_vital' is deprecated")


def _loader() -> DataLoader[tuple[torch.Tensor, ...]]:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.randn(6, 4, generator=g), torch.randn(6, 1, generator=g)), batch_size=2)


def _network() -> torch.nn.Module:
    network = torch.nn.Sequential(torch.nn.Linear(4, 1))
    track_lifetime(network)
    return network


def _ignite_trained(epochs: int) -> torch.nn.Module:
    network = _network()
    optimizer = torch.optim.SGD(network.parameters(), lr=0.1)
    trainer = create_supervised_trainer(network, optimizer, torch.nn.functional.mse_loss)
    ProgressHandler().attach(trainer, optimizers=[optimizer], model=network)
    trainer.run(_loader(), max_epochs=epochs)
    return network


class _Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = _network()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.nn.functional.mse_loss(self.net(batch[0]), batch[1])

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _inspected(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["inspect", str(path)]) == 0
    return capsys.readouterr().out


def _lifetime_batches(out: str) -> int:
    """The lifetime column of the train ``batches`` row."""
    (row,) = (line.split() for line in out.splitlines() if line.split()[:1] == ["batches"])
    return int(row[-1])


def test_inspect_a_torch_saved_state_dict_shows_the_lifetime_it_carries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch.save(_ignite_trained(epochs=2).state_dict(), tmp_path / "weights.pt")
    out = _inspected(tmp_path / "weights.pt", capsys)
    assert "model weights with their lifetime" in out
    assert "progress entry: weights['tracker_core_lifetime']" in out
    assert _lifetime_batches(out) == 6
    assert "weights only:" in out and "device RNG" not in out


def test_inspect_a_lightning_weights_only_checkpoint_reads_its_state_dict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saver = ModelCheckpoint(dirpath=tmp_path, filename="weights", save_weights_only=True)
    trainer = pl.Trainer(
        max_epochs=2,
        callbacks=[ProgressTracker(), saver],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(_Regression(), _loader())
    out = _inspected(tmp_path / "weights.ckpt", capsys)
    assert "progress entry: state_dict['net.tracker_core_lifetime']" in out
    assert _lifetime_batches(out) == 6


def test_inspect_an_accelerate_save_model_folder_reads_its_safetensors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    accelerator = Accelerator(cpu=True)
    network = _network()
    model, optimizer, loader = accelerator.prepare(network, torch.optim.SGD(network.parameters(), lr=0.1), _loader())
    progress = AcceleratorProgress(accelerator)
    with progress.fit(3) as fit:
        for _ in fit.epochs():
            for x, y in progress.train(loader):
                accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                optimizer.step()
                optimizer.zero_grad()
    accelerator.save_model(model, tmp_path / "saved")
    assert (tmp_path / "saved" / "model.safetensors").is_file()
    out = _inspected(tmp_path / "saved", capsys)
    assert "progress entry: model.safetensors: weights['tracker_core_lifetime']" in out
    assert _lifetime_batches(out) == 9


def test_inspect_a_safetensors_file_reads_only_the_lifetime(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    save_file(_ignite_trained(epochs=1).state_dict(), str(tmp_path / "model.safetensors"))
    assert _lifetime_batches(_inspected(tmp_path / "model.safetensors", capsys)) == 3


def test_inspect_json_of_weights_gives_the_lifetime_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch.save(_ignite_trained(epochs=1).state_dict(), tmp_path / "weights.pt")
    assert main(["inspect", str(tmp_path / "weights.pt"), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["format"] == "weights" and document["num_ranks"] == 1
    assert document["progress"]["stages"]["train"]["batches"]["lifetime"]["completed"] == 3
    assert document["facts"]["run_kind"] == "fit"


def test_weights_of_a_model_that_did_not_opt_in_have_no_progress_entry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch.save(torch.nn.Linear(4, 1).state_dict(), tmp_path / "weights.pt")
    assert main(["inspect", str(tmp_path / "weights.pt")]) == 2
    assert "no progress entry" in capsys.readouterr().err


def test_a_damaged_lifetime_in_weights_is_refused_naming_its_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    weights = _ignite_trained(epochs=1).state_dict()
    weights["tracker_core_lifetime"] = torch.tensor([123, 34], dtype=torch.uint8)
    torch.save(weights, tmp_path / "weights.pt")
    assert main(["inspect", str(tmp_path / "weights.pt")]) == 2
    err = capsys.readouterr().err
    assert "damaged model lifetime" in err and "tracker_core_lifetime" in err and "Traceback" not in err


def test_diff_of_two_weights_files_shows_the_batches_trained_between_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    torch.save(_ignite_trained(epochs=1).state_dict(), tmp_path / "one.pt")
    torch.save(_ignite_trained(epochs=2).state_dict(), tmp_path / "two.pt")
    assert main(["diff", str(tmp_path / "one.pt"), str(tmp_path / "two.pt")]) == 1
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert ["stages.train.batches.lifetime.completed", "3", "6"] in rows


def test_inspect_weights_at_a_memory_url_names_the_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fsspec = pytest.importorskip("fsspec")
    filesystem, url = fsspec.filesystem("memory"), f"memory://{tmp_path.name}/weights.pt"
    torch.save(_ignite_trained(epochs=1).state_dict(), tmp_path / "weights.pt")
    filesystem.pipe(url, (tmp_path / "weights.pt").read_bytes())
    try:
        assert main(["inspect", url]) == 0
        out = capsys.readouterr().out
    finally:
        filesystem.rm(f"/{tmp_path.name}", recursive=True)
    assert out.startswith(f"{url}: model weights") and _lifetime_batches(out) == 3
