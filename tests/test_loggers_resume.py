"""After a kill past the last checkpoint and a resume, each logged series holds every step once.

A subprocess logs every step, checkpoints, and SIGKILLs itself after logging past its last
checkpoint; the resume runs here. Read back (TensorBoard's reader, the CSV file): the points before
the checkpoint are the interrupted run's, unchanged; those from the checkpoint on are the resumed
run's (each point carries the ``process`` that logged it).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytest.importorskip("numpy")
pytest.importorskip("tensorboard")

from torch.utils.tensorboard import SummaryWriter

from tracker_core.adapter import rewind_summary_writer

from helpers.distributed_runs import TESTS
from helpers.logger_runs import (
    BATCHES_PER_EPOCH,
    EPOCHS,
    KILL_AT,
    accelerate_run,
    csv_points,
    ignite_run,
    tensorboard_points,
)

STEPS = BATCHES_PER_EPOCH * EPOCHS
RESUMED_AT = 12  # the last checkpoint before the kill


def _interrupted(framework: str, folder: Path) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([str(TESTS), str(TESTS.parent)]))
    done = subprocess.run(
        [sys.executable, "-m", "helpers.logger_runs", framework, str(folder), str(KILL_AT)],
        cwd=TESTS,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]


@pytest.fixture(scope="module")
def lightning() -> ModuleType:
    """``helpers.lightning_logger_runs`` (skipped without Lightning)."""
    return pytest.importorskip("helpers.lightning_logger_runs", exc_type=ImportError)


@pytest.fixture(scope="module")
def lightning_killed(lightning: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Lightning run's folder (TensorBoard and CSV logs of version_0), SIGKILLed after step 15."""
    folder = tmp_path_factory.mktemp("lightning_killed")
    _interrupted("lightning", folder)
    return folder


@pytest.fixture
def lightning_run(lightning_killed: Path, tmp_path: Path) -> Path:
    """A copy of the killed Lightning run's folder, to resume."""
    shutil.copytree(lightning_killed, tmp_path, dirs_exist_ok=True)
    return tmp_path


def _continues_exactly(before: dict[str, list[tuple[int, Any]]], after: dict[str, list[tuple[int, Any]]]) -> None:
    assert [step for step, _ in before["loss"]] == list(range(KILL_AT - 1))  # logged past the checkpoint
    for tag in ("loss", "process"):
        assert [step for step, _ in after[tag]] == list(range(STEPS))  # each step once
        assert after[tag][:RESUMED_AT] == before[tag][:RESUMED_AT]  # unchanged before the checkpoint
    assert {float(value) for _, value in after["process"][:RESUMED_AT]} == {0.0}
    assert {float(value) for _, value in after["process"][RESUMED_AT:]} == {1.0}


def test_a_summary_writer_rewound_to_a_step_hides_every_tags_earlier_points_from_that_step_on(tmp_path: Path) -> None:
    killed = SummaryWriter(str(tmp_path))
    for step in range(8):
        killed.add_scalar("a", float(step), step)
        killed.add_scalar("b", float(step), step)
    killed.flush()
    resumed = SummaryWriter(str(tmp_path))
    assert rewind_summary_writer(resumed, 5) == ""
    for step in range(5, 10):
        resumed.add_scalar("a", 100.0 + step, step)
    resumed.close()
    points = tensorboard_points(tmp_path)
    assert points["a"] == [(step, float(step)) for step in range(5)] + [(step, 100.0 + step) for step in range(5, 10)]
    assert points["b"] == [(step, float(step)) for step in range(5)]


def test_a_summary_writer_says_when_an_event_file_of_its_folder_is_read_after_its_purge(tmp_path: Path) -> None:
    killed = SummaryWriter(str(tmp_path))
    killed.add_scalar("a", 1.0, 1)
    killed.close()
    (written,) = tmp_path.iterdir()
    later = tmp_path / "events.out.tfevents.9999999999.host.1.0"  # opened in a later second, as TensorBoard sorts
    later.write_bytes(written.read_bytes())
    resumed = SummaryWriter(str(tmp_path))
    (own,) = {path.name for path in tmp_path.iterdir()} - {written.name, later.name}
    problem = rewind_summary_writer(resumed, 1)
    assert problem == f"TensorBoard reads {later.name} after this run's {own} (the purge) in {tmp_path}"
    resumed.close()


def test_a_lightning_tensorboard_logger_resumed_after_a_kill_logs_each_step_once(
    lightning_run: Path, lightning: ModuleType
) -> None:
    log_dir = lightning_run / "run" / "version_0"
    before = tensorboard_points(log_dir)
    logger = lightning.logger("tensorboard", lightning_run, 0)
    lightning.fit([logger], 1, ckpt_path=lightning.checkpoint_at(lightning_run, RESUMED_AT))
    _continues_exactly(before, tensorboard_points(log_dir))


def test_a_lightning_csv_logger_resumed_after_a_kill_keeps_the_rows_before_the_checkpoint_byte_for_byte(
    lightning_run: Path, lightning: ModuleType
) -> None:
    before = csv_points(lightning_run)
    lightning.fit(
        [lightning.logger("csv", lightning_run, 0)],
        1,
        ckpt_path=lightning.checkpoint_at(lightning_run, RESUMED_AT),
    )
    _continues_exactly(before, csv_points(lightning_run))


def test_a_lightning_logger_writing_the_resume_into_a_new_version_is_named_in_one_warning(
    lightning_run: Path, lightning: ModuleType
) -> None:
    logger = lightning.logger("csv", lightning_run, None)
    with pytest.warns(UserWarning, match=r"CSVLogger \(it writes this fit into version_1, .* version=0\)") as caught:
        lightning.fit([logger], 1, ckpt_path=lightning.checkpoint_at(lightning_run, RESUMED_AT))
    assert len([w for w in caught if "interrupted run" in str(w.message)]) == 1


def test_a_logger_the_adapter_cannot_rewind_is_named_in_one_warning(lightning_run: Path, lightning: ModuleType) -> None:
    import pytorch_lightning as pl

    class _Listing(pl.loggers.Logger):
        """A logger of the user's own: the adapter cannot rewind it."""

        name = "listing"
        version = 0

        def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
            pass

        def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
            pass

    loggers = [lightning.logger("tensorboard", lightning_run, 0), _Listing()]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lightning.fit(loggers, 1, ckpt_path=lightning.checkpoint_at(lightning_run, RESUMED_AT))
    named = [str(w.message) for w in caught if "interrupted run" in str(w.message)]
    assert len(named) == 1
    assert "_Listing (the adapter cannot rewind it)" in named[0]
    assert "TensorBoardLogger" not in named[0]


@pytest.fixture(scope="module")
def ignite_killed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An Ignite run's folder (TensorBoard logs, checkpoints), SIGKILLed after logging iteration 16."""
    pytest.importorskip("ignite")
    folder = tmp_path_factory.mktemp("ignite_killed")
    _interrupted("ignite", folder)
    return folder


def test_an_ignite_tensorboard_logger_made_with_purge_step_after_the_load_logs_each_iteration_once(
    ignite_killed: Path, tmp_path: Path
) -> None:
    shutil.copytree(ignite_killed, tmp_path, dirs_exist_ok=True)
    before = tensorboard_points(tmp_path / "tb")
    assert [step for step, _ in before["train/loss"]] == list(range(1, KILL_AT + 1))
    ignite_run(tmp_path, 1, resume_from=str(tmp_path / "checkpoints" / f"checkpoint_{RESUMED_AT}.pt"))
    after = tensorboard_points(tmp_path / "tb")
    for tag in ("train/loss", "train/process"):
        assert [step for step, _ in after[tag]] == list(range(1, STEPS + 1))
        assert after[tag][:RESUMED_AT] == before[tag][:RESUMED_AT]
    assert {value for _, value in after["train/process"][:RESUMED_AT]} == {0.0}
    assert {value for _, value in after["train/process"][RESUMED_AT:]} == {1.0}


@pytest.fixture(scope="module")
def accelerate_killed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An Accelerate run's folder (the tensorboard tracker's run, save_state folders), SIGKILLed after step 16."""
    pytest.importorskip("accelerate")
    folder = tmp_path_factory.mktemp("accelerate_killed")
    _interrupted("accelerate", folder)
    return folder


def test_an_accelerate_tensorboard_tracker_resumed_after_a_kill_logs_each_step_once(
    accelerate_killed: Path, tmp_path: Path
) -> None:
    shutil.copytree(accelerate_killed, tmp_path, dirs_exist_ok=True)
    before = tensorboard_points(tmp_path / "run")
    assert [step for step, _ in before["loss"]] == list(range(1, KILL_AT + 1))
    accelerate_run(tmp_path, 1, resume_from=str(tmp_path / f"step_{RESUMED_AT}"))
    after = tensorboard_points(tmp_path / "run")
    for tag in ("loss", "process"):
        assert [step for step, _ in after[tag]] == list(range(1, STEPS + 1))
        assert after[tag][:RESUMED_AT] == before[tag][:RESUMED_AT]
    assert {value for _, value in after["process"][:RESUMED_AT]} == {0.0}
    assert {value for _, value in after["process"][RESUMED_AT:]} == {1.0}


def test_an_accelerate_tracker_the_adapter_cannot_rewind_is_named_in_one_warning(
    accelerate_killed: Path, tmp_path: Path
) -> None:
    from accelerate.tracking import GeneralTracker

    class Listing(GeneralTracker):  # a tracker of the user's own
        name = "listing"
        requires_logging_directory = False

        def __init__(self) -> None:
            super().__init__()

        @property
        def tracker(self) -> None:
            return None

        def store_init_configuration(self, values: dict[str, Any]) -> None:
            pass

        def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
            pass

    shutil.copytree(accelerate_killed, tmp_path, dirs_exist_ok=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        accelerate_run(tmp_path, 1, resume_from=str(tmp_path / f"step_{RESUMED_AT}"), also=Listing())
    named = [str(w.message) for w in caught if "interrupted run" in str(w.message)]
    assert len(named) == 1
    assert "Listing (the adapter cannot rewind it)" in named[0]
    assert "TensorBoardTracker" not in named[0]
    assert [step for step, _ in tensorboard_points(tmp_path / "run")["loss"]] == list(range(1, STEPS + 1))
