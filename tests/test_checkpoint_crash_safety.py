"""A save killed part-way, a full disk, two processes saving into one folder: never a checkpoint that
``newest_intact_checkpoint`` accepts but that resumes wrongly.

Kills: tests/helpers/save_kill_zygote.py forks children that ``save_state`` into one fixed folder
after every batch and SIGKILLs each at a seeded random instant; whatever is left must be refused,
or hold the weights, optimizer and scheduler states, RNG states and progress of one and the same
save (checked against what the child logged before each save). 12 kills in ``make test``, 150 with ``TRACKER_MATRIX=full``.
"""

from __future__ import annotations

import os
import random
import resource
import signal
import subprocess
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("accelerate")

import torch

from tracker_core import ProgressStateError
from tracker_core.checkpoints import CheckpointFileError, newest_intact_checkpoint, read_checkpoint

from helpers.accelerate_drive import Setup, StopAt, run
from helpers.distributed_runs import TESTS
from helpers.save_crc import rng_crc32, state_crc32, tensor_crc32

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")

FULL = os.environ.get("TRACKER_MATRIX") == "full"


@pytest.fixture(scope="module")
def zygote() -> Iterator[subprocess.Popen[str]]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent)]))
    process = subprocess.Popen(
        [sys.executable, str(TESTS / "helpers" / "save_kill_zygote.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=TESTS,
    )
    yield process
    assert process.stdin is not None
    process.stdin.close()
    process.wait(timeout=60)


def _kill_during_saves(zygote: subprocess.Popen[str], folder: Path, delay: float) -> str:
    assert zygote.stdin is not None and zygote.stdout is not None
    zygote.stdin.write(f"{folder} {delay}\n")
    zygote.stdin.flush()
    return zygote.stdout.readline().strip()


def _logged_saves(folder: Path) -> dict[int, tuple[dict[str, int], int, int, int]]:
    """Per global batch count the child logged before a save: (weights CRC-32 per tensor, optimizer, scheduler
    and RNG CRC-32s)."""
    saves = {}
    for line in Path(f"{folder}.log").read_text().splitlines():
        if line.startswith("done"):
            continue
        _, started, *weights, optimizer, scheduler, rng = line.split()
        crcs = {k: int(v) for k, v in (w.split("=") for w in weights)}
        saves[int(started)] = (crcs, int(optimizer), int(scheduler), int(rng))
    return saves


def _assert_refused_or_one_save(folder: Path) -> bool:
    """Whether ``folder`` was accepted; if it was, its parts must all come from one logged save."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            newest_intact_checkpoint([folder])
    except CheckpointFileError:
        return False
    progress = torch.load(folder / "progress_tracker_0.pt", weights_only=True)["tracker"]["progress"]
    logged = _logged_saves(folder)[progress["stages"]["train"]["batches"]["lifetime"]["processed"]]
    from safetensors.torch import load_file

    found = {name: tensor_crc32(tensor) for name, tensor in load_file(folder / "model.safetensors").items()}
    assert found == logged[0], "weights from another save than the progress file's"
    assert state_crc32(torch.load(folder / "optimizer.bin", weights_only=True)) == logged[1]
    assert state_crc32(torch.load(folder / "scheduler.bin", weights_only=True)) == logged[2]
    rng = torch.load(folder / "random_states_0.pkl", weights_only=False)  # written by the test's own child
    assert rng_crc32(rng) == logged[3], "RNG states from another save than the progress file's"
    return True


def _kills(zygote: subprocess.Popen[str], tmp_path: Path, runs: int) -> None:
    draw = random.Random(18)
    accepted = 0
    for index in range(runs):
        folder = tmp_path / f"run{index}" / "checkpoint"
        folder.parent.mkdir()
        assert _kill_during_saves(zygote, folder, draw.uniform(0.0, 0.25)) in ("killed", "finished")
        accepted += _assert_refused_or_one_save(folder)
    print(f"{runs} kills: {accepted} left one whole save (accepted), {runs - accepted} refused")
    assert accepted > 0  # a kill between saves leaves a whole one, which must be accepted


def test_save_state_into_a_fixed_folder_killed_at_random_instants_never_leaves_a_mixed_checkpoint_accepted(
    zygote: subprocess.Popen[str], tmp_path: Path
) -> None:
    _kills(zygote, tmp_path, 12)


@pytest.mark.matrix
@pytest.mark.skipif(not FULL, reason="150 kills with TRACKER_MATRIX=full (make conformance)")
def test_save_state_killed_150_times_never_leaves_a_mixed_checkpoint_accepted(
    zygote: subprocess.Popen[str], tmp_path: Path
) -> None:
    _kills(zygote, tmp_path, 150)


def test_two_processes_saving_into_one_folder_are_detected(tmp_path: Path) -> None:
    """Two runs of different seeds save into one folder (rank checks forgotten): one's progress file
    and the other's weights are refused as parts of different saves."""
    folder = tmp_path / "shared"
    run(Setup(), stop=StopAt(5), save_dir=str(folder), seed_value=1)
    progress_file = (folder / "progress_tracker_0.pt").read_bytes()
    run(Setup(), stop=StopAt(6), save_dir=str(folder), seed_value=2)
    (folder / "progress_tracker_0.pt").write_bytes(progress_file)  # the first process's rename came last
    with pytest.raises(CheckpointFileError, match="parts of this folder come from different saves"):
        newest_intact_checkpoint([folder])


# parts of two saves -------------------------------------------------------------------------------
def _two_saves_into_one_folder(tmp_path: Path) -> tuple[Any, Any, Any, Path, Path]:
    """A real Accelerate run (SGD with momentum, a StepLR, a shuffling StatefulDataLoader) saving after batch 1 and 2
    into one fixed folder; save 1's folder is copied aside. (accelerator, progress, model, save 1, save 2)."""
    import shutil

    from torch.utils.data import DataLoader, TensorDataset

    from tracker_core.integrations.accelerate import AcceleratorProgress

    from helpers.accelerate_drive import fresh_accelerator

    torch.manual_seed(0)
    accelerator = fresh_accelerator(Setup(accumulation=1, stateful=True))
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    x = torch.linspace(-1, 1, 40).reshape(10, 4)
    loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=3, shuffle=True)
    model, optimizer, scheduler, loader = accelerator.prepare(model, optimizer, scheduler, loader)
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    folder, first = tmp_path / "checkpoint", tmp_path / "save1"
    with progress.fit(1) as fit:
        for _epoch in fit.epochs():
            for index, (inputs, targets) in enumerate(progress.train(loader)):
                accelerator.backward(torch.nn.functional.mse_loss(model(inputs), targets + torch.rand(1)))
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                accelerator.save_state(str(folder))
                if index == 0:
                    shutil.copytree(folder, first)
                if index == 1:
                    break
    return accelerator, progress, model, first, folder


@pytest.mark.parametrize(
    "older", ["model.safetensors", "optimizer.bin", "scheduler.bin", "dl_state_dict.bin", "random_states_0.pkl"]
)
def test_a_folder_holding_one_file_of_the_save_before_is_refused_by_load_state_and_newest_intact_checkpoint(
    tmp_path: Path, older: str
) -> None:
    """A save_state into a fixed folder killed before it rewrote ``older``: every file Accelerate writes after
    the progress file (weights, optimizer, scheduler, stateful loader, RNG states) is checked against it."""
    accelerator, progress, model, first, folder = _two_saves_into_one_folder(tmp_path)
    (folder / older).write_bytes((first / older).read_bytes())
    with pytest.raises(CheckpointFileError, match=f"different saves.*{older}"):
        newest_intact_checkpoint([folder])
    before = (progress.view.state_dict(), [p.detach().clone() for p in model.parameters()], torch.get_rng_state())
    with pytest.raises(ProgressStateError, match=f"different saves.*{older}.*nothing was loaded"):
        accelerator.load_state(str(folder))
    assert progress.view.state_dict() == before[0]
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), before[1], strict=True))
    assert torch.equal(torch.get_rng_state(), before[2])


def test_a_folder_of_one_whole_save_with_a_scheduler_is_accepted_and_loads(tmp_path: Path) -> None:
    accelerator, _, _, first, folder = _two_saves_into_one_folder(tmp_path)
    assert newest_intact_checkpoint([first]) == first
    accelerator.load_state(str(folder))


@pytest.mark.parametrize(
    ("framework", "names"),
    [("lightning", ("step=1.ckpt", "step=3.ckpt")), ("ignite", ("checkpoint_2.pt", "checkpoint_4.pt"))],
)
def test_two_writers_interleaved_in_one_checkpoint_file_are_refused_and_the_older_intact_file_chosen(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, framework: str, names: tuple[str, str]
) -> None:
    """Two processes saving one Lightning or Ignite checkpoint path (rank checks forgotten under DDP): the file
    holds one's bytes up to some offset and the other's after it. Unless that is byte for byte one whole save,
    it is refused (the zip's CRC-32s), and ``newest_intact_checkpoint`` passes over it to the older file."""
    pytest.importorskip(framework if framework == "ignite" else "pytorch_lightning")
    from helpers.saved_checkpoints import saved_checkpoints

    saved = getattr(saved_checkpoints(tmp_path_factory), framework)
    first, second = ((saved / name).read_bytes() for name in names)
    assert len(first) == len(second) and first != second
    older = tmp_path / "older.pt"
    older.write_bytes((saved / names[0]).read_bytes())
    refused = 0
    for eighth in range(1, 8):
        cut = len(first) * eighth // 8
        spliced = tmp_path / "shared.pt"
        spliced.write_bytes(first[:cut] + second[cut:])
        os.utime(older, ns=(1, 1))  # the spliced file is the newest
        if spliced.read_bytes() in (first, second):
            continue
        with pytest.raises(CheckpointFileError, match=r"damaged|truncated"):
            read_checkpoint(spliced)
        with pytest.warns(UserWarning, match="skipped a checkpoint newer"):
            assert newest_intact_checkpoint([spliced, older]) == older
        refused += 1
    assert refused >= 5


# a full disk -------------------------------------------------------------------------------------
@contextmanager
def _small_disk(tmp_path: Path, kilobytes: int) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={kilobytes}k", "tmpfs", str(disk)], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root); test_a_file_size_limit_... simulates a full disk")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _fill(disk: Path, leave: int) -> None:
    """Write a filler file until only about ``leave`` bytes are free on ``disk``."""
    stats = os.statvfs(disk)
    (disk / "filler").write_bytes(bytes(max(stats.f_bavail * stats.f_frsize - leave, 0)))


def _reference(setup: Setup) -> Any:
    return run(setup)


def test_a_full_disk_during_save_state_leaves_no_commit_and_the_previous_checkpoint_resumes_exactly(
    tmp_path: Path,
) -> None:
    """Accelerate writes its files before the commit: the full disk fails one of them, and the folder has none."""
    # Accelerate's StatefulDataLoader resumes at its batch (in order: over torch's RandomSampler, which has no state, a
    # 0-worker one draws the epoch's order again, warned; workers would outlive the forked child below)
    setup = Setup(stateful=True, shuffle=False)
    with _small_disk(tmp_path, 512) as disk:
        stopped = run(setup, stop=StopAt(5), save_dir=str(disk / "previous"))
        _fill(disk, 8_000)
        with pytest.raises((OSError, RuntimeError)):  # torch.save reports a failed write as a RuntimeError
            run(setup, stop=StopAt(6), save_dir=str(disk / "next"))
        assert not [p for p in (disk / "next").iterdir() if p.name.startswith(("progress_tracker", ".progress"))]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            chosen = newest_intact_checkpoint([disk / "previous", disk / "next"])
        assert chosen == disk / "previous"
        resumed = run(setup, load_dir=str(chosen), seed_value=7)
    reference = _reference(setup)
    assert stopped.train_ids + resumed.train_ids == reference.train_ids
    assert all(torch.equal(a, b) for a, b in zip(resumed.weights, reference.weights, strict=True))
    assert resumed.state == reference.state


def _lightning_save(disk: Path, name: str) -> None:
    import pytorch_lightning as pl

    from tracker_core.integrations.lightning import ProgressTracker

    from helpers.saved_checkpoints import _loader, _Module

    torch.manual_seed(0)
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=1,
        callbacks=[ProgressTracker()],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    trainer.fit(_Module(), _loader())
    trainer.save_checkpoint(disk / name)


def _ignite_save(disk: Path, name: str) -> None:
    from ignite.engine import Engine
    from ignite.handlers import Checkpoint, DiskSaver

    from tracker_core.integrations.ignite import ProgressHandler

    from helpers.saved_checkpoints import _loader

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    trainer = Engine(lambda engine, batch: None)
    handler = ProgressHandler()
    handler.attach(trainer)
    trainer.run(_loader(), max_epochs=1)
    Checkpoint({"model": model, "progress": handler}, DiskSaver(str(disk), require_empty=False), filename_prefix=name)(
        trainer
    )


@pytest.mark.parametrize("framework", ["lightning", "ignite"])
def test_a_full_disk_during_a_lightning_or_ignite_save_leaves_the_previous_checkpoint_chosen_and_unchanged(
    tmp_path: Path, framework: str
) -> None:
    """The framework writes the file, and raises its own error (Lightning's OSError names the file; Ignite's is
    torch.save's RuntimeError with the OSError 'No space left on device' as its context, naming no path):
    whatever the failed save left is refused, and the previous checkpoint, byte for byte as it was, is chosen."""
    pytest.importorskip("ignite" if framework == "ignite" else "pytorch_lightning")
    save = _lightning_save if framework == "lightning" else _ignite_save
    with _small_disk(tmp_path, 256) as disk, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        save(disk, "previous.ckpt" if framework == "lightning" else "previous")
        (previous,) = (p for p in disk.iterdir() if p.name.startswith("previous"))
        intact = previous.read_bytes()
        _fill(disk, 8_000)
        with pytest.raises((OSError, RuntimeError)) as raised:  # Ignite: torch.save's RuntimeError on closing
            save(disk, "next.ckpt" if framework == "lightning" else "next")
        chain = [raised.value, raised.value.__context__, raised.value.__cause__]
        assert any("No space left on device" in str(error) for error in chain if error is not None)
        assert framework == "ignite" or str(disk / "next.ckpt") in str(raised.value)
        assert previous.read_bytes() == intact
        assert newest_intact_checkpoint(disk) == previous
        assert (
            read_checkpoint(previous).entries[0]["progress"]["stages"]["train"]["epochs"]["lifetime"]["completed"] == 1
        )


def _save_under_a_file_size_limit(setup: Setup, folder: Path, limit: int) -> str:
    """``run(...)`` saving into ``folder`` in a forked child whose files may not grow past ``limit`` bytes
    (RLIMIT_FSIZE, SIGXFSZ ignored: a write fails as on a full disk); the error message it got."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        message = "no error"
        try:
            signal.alarm(120)
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
            run(setup, stop=StopAt(6), save_dir=str(folder))
        except OSError as error:
            message = f"OSError: {error}"
        except BaseException as error:
            message = f"{type(error).__name__}: {error}"
        finally:
            os.write(write_end, message.encode()[:60_000])
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as stream:
        message = stream.read().decode()
    os.waitpid(child, 0)
    return message


def test_a_file_size_limit_during_save_state_leaves_no_commit_and_the_previous_checkpoint_resumes_exactly(
    tmp_path: Path,
) -> None:
    """The full disk simulated where no tmpfs can be mounted: writes past 8 KB fail (EFBIG)."""
    # Accelerate's StatefulDataLoader resumes at its batch (in order: over torch's RandomSampler, which has no state, a
    # 0-worker one draws the epoch's order again, warned; workers would outlive the forked child below)
    setup = Setup(stateful=True, shuffle=False)
    stopped = run(setup, stop=StopAt(5), save_dir=str(tmp_path / "previous"))
    message = _save_under_a_file_size_limit(setup, tmp_path / "next", 8_000)
    assert message.startswith(("OSError", "RuntimeError")), message
    assert not [p for p in (tmp_path / "next").iterdir() if p.name.startswith(("progress_tracker", ".progress"))]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chosen = newest_intact_checkpoint([tmp_path / "previous", tmp_path / "next"])
    assert chosen == tmp_path / "previous"
    resumed = run(setup, load_dir=str(chosen), seed_value=7)
    reference = _reference(setup)
    assert stopped.train_ids + resumed.train_ids == reference.train_ids
    assert all(torch.equal(a, b) for a, b in zip(resumed.weights, reference.weights, strict=True))
    assert resumed.state == reference.state
