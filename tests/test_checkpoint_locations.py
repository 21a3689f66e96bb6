"""Checkpoints where users keep them: the README's plain-loop layout, a torch-only install, folders searched
recursively, Lightning's sharded folders and fsspec URLs, for ``progress-tracker inspect``/``diff`` and
``newest_intact_checkpoint``.

Checkpoints come from real runs on the CPU: a plain loop as the README writes it, and the Lightning, Ignite
and Accelerate runs of tests/helpers/saved_checkpoints.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import torch
from torch.utils.data import DataLoader

pytest.importorskip("torchdata")

from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import Tracker
from tracker_core.checkpoints import newest_intact_checkpoint
from tracker_core.cli import main

if TYPE_CHECKING:
    from helpers.saved_checkpoints import Saved

TESTS = Path(__file__).resolve().parent
_WITHOUT_NUMPY = """
import sys


class _NoNumpy:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "numpy":
            raise ModuleNotFoundError("No module named 'numpy' (a torch-only install)", name=name)
        return None


sys.meta_path.insert(0, _NoNumpy())
from tracker_core.cli import main
from tracker_core.checkpoints import newest_intact_checkpoint

for path in sys.argv[1:]:
    print("exit", main(["inspect", path]), flush=True)
assert "numpy" not in sys.modules
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Saved:
    """Real Lightning, Ignite and Accelerate checkpoints (NumPy present), written once per session."""
    for framework in ("pytorch_lightning", "ignite", "accelerate"):
        pytest.importorskip(framework)
    from helpers.saved_checkpoints import saved_checkpoints

    return saved_checkpoints(tmp_path_factory)


def _plain_loop_checkpoint(path: Path, stop_after: int = 3) -> None:
    """The README's plain loop: ``checkpoint["progress_tracker"] = tracker.state_dict()``, saved mid-epoch from a
    StatefulDataLoader (the README's loader: it resumes at its batch)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = StatefulDataLoader(torch.arange(10.0).reshape(10, 1), batch_size=2, shuffle=True)
    tracker = Tracker()
    tracker.track_train_loader(loader)
    progress, train = tracker.progress, tracker.progress.train
    progress.run_ready("fit")
    progress.run_started()
    train.epoch_ready()
    train.epoch_started()
    for index, batch in enumerate(loader):
        train.batch_ready()
        train.batch_started()
        model(batch).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        train.optimizer_step()
        train.batch_processed(samples=len(batch))
        train.batch_completed()
        if index + 1 == stop_after:
            break
    checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
    checkpoint["progress_tracker"] = tracker.state_dict()
    torch.save(checkpoint, path)


def _lightning_sharded(checkpoint_file: Path, folder: Path) -> Path:
    """``folder`` laid out as Lightning's ``FSDPStrategy.save_checkpoint`` writes a sharded state dict: the
    weights and optimizer states through torch.distributed.checkpoint (shards, then ``.metadata``), the rest
    of the checkpoint ``torch.save``d as ``meta.pt``."""
    import torch.distributed.checkpoint as dcp

    checkpoint = torch.load(checkpoint_file, weights_only=True)
    converted = {"model": checkpoint.pop("state_dict")}
    converted.update({f"optimizer_{i}": state for i, state in enumerate(checkpoint.pop("optimizer_states", []))})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed ... uninitialized, assuming ... a single process"
        dcp.save(converted, checkpoint_id=folder)
    torch.save(checkpoint, folder / "meta.pt")
    return folder


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    return captured.err


def _inspect_json(path: str | Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    assert main(["inspect", str(path), "--json"]) == 0, capsys.readouterr().err
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return document


# the README's plain loop ----------------------------------------------------------------------
def test_inspect_reads_the_readmes_plain_loop_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "checkpoint.pt"
    _plain_loop_checkpoint(path)

    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "plain-loop checkpoint" in out and "checkpoint['progress_tracker']" in out
    assert "mid-epoch: yes, 3 batches into train epoch 0" in out
    data = _inspect_json(path, capsys)
    assert (data["format"], data["facts"]["global_step"]) == ("plain", 3)


# a torch-only install ----------------------------------------------------------------------------
def test_a_torch_only_install_inspects_checkpoints_written_with_numpy_present(saved: Saved, tmp_path: Path) -> None:
    pytest.importorskip("numpy")
    plain = tmp_path / "plain.pt"
    _plain_loop_checkpoint(plain)
    paths = [saved.lightning / "step=1.ckpt", saved.ignite / "checkpoint_3.pt", saved.accelerate / "mid", plain]

    result = subprocess.run(
        [sys.executable, "-c", _WITHOUT_NUMPY, *map(str, paths)],
        cwd=TESTS,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stdout.count("exit 0") == len(paths), result.stdout + result.stderr[-3000:]
    assert "mid-accumulation: yes, 1 batch not" in result.stdout
    assert "not checked: random_states_0.pkl" not in result.stdout  # the commit checks its bytes: no NumPy needed


# Lightning's sharded checkpoint folders ----------------------------------------------------------
def test_inspect_reads_a_lightning_sharded_folder_from_its_meta_pt(
    saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = saved.lightning / "step=1.ckpt"
    folder = _lightning_sharded(file, tmp_path / "step=1.ckpt")

    data = _inspect_json(folder, capsys)

    assert (data["format"], data["location"]) == ("lightning", "meta.pt['callbacks']['ProgressTracker']")
    assert data["progress"] == _inspect_json(file, capsys)["progress"]
    assert main(["diff", str(file), str(folder)]) == 0
    assert "Lightning sharded checkpoint folder" in capsys.readouterr().out


def test_a_sharded_folder_whose_shards_were_cut_short_is_refused(
    saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _lightning_sharded(saved.lightning / "step=1.ckpt", tmp_path / "step=1.ckpt")
    (folder / ".metadata").unlink()

    err = _error(["inspect", str(folder)], capsys)

    assert str(folder) in err and "Lightning sharded checkpoint folder" in err and ".metadata" in err


def test_torch_distributed_checkpoint_shards_without_meta_pt_are_refused_saying_what_they_are(
    saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _lightning_sharded(saved.lightning / "step=1.ckpt", tmp_path / "shards")
    (folder / "meta.pt").unlink()

    err = _error(["inspect", str(folder)], capsys)

    assert "a torch.distributed.checkpoint folder (.metadata and *.distcp shards)" in err
    assert "Accelerate" not in err and "progress_tracker_<rank>.pt" not in err


def test_a_deepspeed_folder_is_refused_saying_what_it_is(
    saved: Saved, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "epoch=0-step=1.ckpt"  # as DeepSpeed's save_checkpoint(folder, tag="checkpoint") lays it out
    (folder / "checkpoint").mkdir(parents=True)
    (folder / "latest").write_text("checkpoint")
    (folder / "zero_to_fp32.py").write_text("")
    shutil.copy(saved.lightning / "step=1.ckpt", folder / "checkpoint" / "mp_rank_00_model_states.pt")

    err = _error(["inspect", str(folder)], capsys)

    assert "a DeepSpeed checkpoint folder" in err and "convert_zero_checkpoint_to_fp32_state_dict" in err


# a folder searched recursively -------------------------------------------------------------------
def test_newest_intact_checkpoint_of_lightning_logs_finds_what_a_default_trainer_wrote(tmp_path: Path) -> None:
    pl = pytest.importorskip("pytorch_lightning")
    from tracker_core.integrations.lightning import ProgressTracker

    class Module(pl.LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.layer(batch).pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=1,
        default_root_dir=tmp_path,
        callbacks=[ProgressTracker()],
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Module(), DataLoader(torch.ones(6, 4), batch_size=2))

    chosen = newest_intact_checkpoint(tmp_path / "lightning_logs")

    assert chosen == tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "epoch=0-step=3.ckpt"


def test_the_search_orders_by_modification_time_across_sub_folders_and_skips_inside_checkpoint_folders(
    saved: Saved, tmp_path: Path
) -> None:
    older = tmp_path / "runs" / "version_9" / "checkpoints" / "step=4.ckpt"
    newer = tmp_path / "runs" / "version_10" / "checkpoints" / "step=1.ckpt"
    accelerate = tmp_path / "runs" / "accelerate" / "end"
    for source, target in [(saved.lightning / "step=4.ckpt", older), (saved.lightning / "step=1.ckpt", newer)]:
        target.parent.mkdir(parents=True)
        shutil.copy(source, target)
    shutil.copytree(saved.accelerate / "end", accelerate)
    for number, path in enumerate([*accelerate.iterdir(), older, newer]):
        os.utime(path, ns=(number, number))
    assert newest_intact_checkpoint(tmp_path / "runs") == newer  # the later step, in an older version, is not

    os.utime(older, ns=(10**9, 10**9))
    assert newest_intact_checkpoint(tmp_path / "runs") == older

    os.utime(accelerate / "model.safetensors", ns=(10**10, 10**10))
    assert newest_intact_checkpoint(tmp_path / "runs") == accelerate  # its files are no candidates of their own

    os.utime(older, ns=(10**10, 10**10))
    os.utime(newer, ns=(10**10, 10**10))
    assert newest_intact_checkpoint(tmp_path / "runs") == newer  # a tie: version_10 after version_9


# fsspec URLs ---------------------------------------------------------------------------------------
@pytest.fixture
def memory_url(tmp_path: Path) -> Any:
    """A fresh ``memory://`` folder (fsspec's in-process filesystem), removed after the test."""
    fsspec = pytest.importorskip("fsspec")
    filesystem = fsspec.filesystem("memory")
    root = f"/{tmp_path.name}"
    yield filesystem, f"memory://{tmp_path.name}"
    if filesystem.exists(root):
        filesystem.rm(root, recursive=True)


def test_inspect_and_diff_read_checkpoints_at_memory_urls(
    saved: Saved, memory_url: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    filesystem, url = memory_url
    local = saved.lightning / "step=1.ckpt"
    filesystem.pipe(f"{url}/step=1.ckpt", local.read_bytes())
    filesystem.put(str(saved.accelerate / "end"), f"{url}/end", recursive=True)

    data = _inspect_json(f"{url}/step=1.ckpt", capsys)
    assert (data["path"], data["format"]) == (f"{url}/step=1.ckpt", "lightning")
    assert main(["diff", str(local), f"{url}/step=1.ckpt"]) == 0
    assert "identical progress" in capsys.readouterr().out
    assert _inspect_json(f"{url}/end", capsys)["format"] == "accelerate"


def test_newest_intact_checkpoint_searches_a_memory_url_and_returns_the_url(saved: Saved, memory_url: Any) -> None:
    filesystem, url = memory_url
    folder = f"{url}/lightning_logs/version_0/checkpoints"
    for name in ("step=1.ckpt", "step=4.ckpt"):
        filesystem.pipe(f"{folder}/{name}", (saved.lightning / name).read_bytes())
    whole = (saved.lightning / "final.ckpt").read_bytes()
    filesystem.pipe(f"{folder}/step=5.ckpt", whole[: len(whole) // 2])  # the newest, cut short

    with pytest.warns(UserWarning, match=r"memory://.*step=5\.ckpt: truncated"):
        chosen = newest_intact_checkpoint(f"{url}/lightning_logs")

    assert chosen == f"{folder}/step=4.ckpt"


def test_a_file_url_is_read_as_the_local_path(saved: Saved, capsys: pytest.CaptureFixture[str]) -> None:
    assert _inspect_json(f"file://{saved.lightning / 'step=1.ckpt'}", capsys)["path"] == str(
        saved.lightning / "step=1.ckpt"
    )
    assert newest_intact_checkpoint(f"file://{saved.lightning}") == saved.lightning / "final.ckpt"


def test_a_missing_url_and_an_unknown_protocol_exit_with_2_naming_them(
    memory_url: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _filesystem, url = memory_url
    assert f"{url}/none.ckpt: no such file or folder" in _error(["inspect", f"{url}/none.ckpt"], capsys)
    assert "nosuch://bucket/a.ckpt" in _error(["inspect", "nosuch://bucket/a.ckpt"], capsys)
