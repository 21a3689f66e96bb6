"""Each adapter's runs land in the ledger: how they ended, and the lost work its heartbeat measured."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("ignite")
pytest.importorskip("accelerate")

import torch
from ignite.engine import Events
from pytorch_lightning.callbacks import ModelCheckpoint

import tracker_core
from tracker_core.integrations.lightning import ProgressTracker

from helpers import lightning_program as lp
from helpers.ignite_program import Config, build


@pytest.fixture(autouse=True)
def _beat_at_every_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACKER_HEARTBEAT_SECONDS", "0")


def _runs(view: Any) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = view.state_dict()["ledger"]["runs"]
    return runs


def test_lightning_a_crashed_fit_resumed_from_its_checkpoint_records_the_batches_it_lost(tmp_path: Path) -> None:
    heartbeat = tmp_path / "heartbeat.json"
    saver = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1, filename="{step}")
    crashing = lp.trainer([ProgressTracker(heartbeat=heartbeat), saver], max_epochs=1, enable_checkpointing=True)
    with pytest.raises(RuntimeError, match="crash"):
        crashing.fit(lp.Crashing(crash_at=3), lp.loader(n=12, batch=2))
    assert heartbeat.exists()
    resumed = lp.trainer([ProgressTracker(heartbeat=heartbeat)], max_epochs=1)
    resumed.fit(lp.Crashing(crash_at=None), lp.loader(n=12, batch=2), ckpt_path=str(tmp_path / "step=1.ckpt"))
    crashed, completed = _runs(tracker_core.get_progress(resumed))
    assert crashed["ended"] == "crashed"
    assert (crashed["end"]["batches"], crashed["lost"]["batches"], crashed["lost"]["steps"]) == (1, 2, 2)
    assert (completed["ended"], completed["start"]["batches"], completed["end"]["batches"]) == ("completed", 1, 6)


def test_lightning_a_fit_told_to_stop_ends_stopped_early() -> None:
    model = lp.Recording()
    model.stop_at = 1
    trainer = lp.trainer([ProgressTracker()], max_epochs=1)
    trainer.fit(model, lp.loader())
    model.stop_at = None
    (fit,) = _runs(tracker_core.get_progress(trainer))
    assert fit["ended"] in ("stopped_early", "completed")
    assert fit["ended"] == ("stopped_early" if trainer.should_stop else "completed")


def test_ignite_a_terminated_run_ends_stopped_early_and_a_completed_one_completed() -> None:
    program = build(Config(), seed=0)
    program.trainer.add_event_handler(Events.ITERATION_COMPLETED(once=2), lambda: program.trainer.terminate())
    program.run()
    ledger = _runs(program.progress.view)
    assert [(run["kind"], run["ended"]) for run in ledger if run["kind"] == "fit"] == [("fit", "stopped_early")]
    assert ledger[0]["end"]["batches"] == 2 and ledger[0]["global_batch_size"] > 0


def test_ignite_a_run_that_reaches_max_iters_inside_an_epoch_ends_completed() -> None:
    program = build(Config(), seed=0)
    program.trainer.run(program.loader, max_iters=6)  # 4 batches an epoch: Ignite ends it firing TERMINATE
    (fit,) = [run for run in _runs(program.progress.view) if run["kind"] == "fit"]
    assert fit["ended"] == "completed" and fit["end"]["batches"] == 6


def _raise_at_iteration(program: Any, iteration: int, exception: BaseException) -> None:
    def raise_it() -> None:
        raise exception

    program.trainer.add_event_handler(Events.ITERATION_COMPLETED(once=iteration), raise_it)


@pytest.mark.parametrize("exception", [KeyboardInterrupt(), RuntimeError("crash")])
def test_ignite_an_exception_leaving_run_goes_on_and_leaves_the_run_open_where_ignite_stopped(
    exception: BaseException,
) -> None:
    program = build(Config(), seed=0)
    _raise_at_iteration(program, 3, exception)
    with pytest.raises(type(exception)) as raised:
        program.run()
    assert raised.value is exception
    (fit,) = _runs(program.progress.view)  # Ignite tells no handler; a resume records it crashed (its heartbeat)
    assert (fit["ended"], fit["end"]["batches"]) == ("running", 3)


def test_ignite_an_exception_an_exception_raised_handler_takes_does_not_end_the_run() -> None:
    program = build(Config(), seed=0)
    _raise_at_iteration(program, 3, RuntimeError("handled"))
    program.trainer.add_event_handler(Events.EXCEPTION_RAISED, lambda engine, error: None)
    program.run()
    assert [run["ended"] for run in _runs(program.progress.view)] == ["completed"]  # Ignite went on with the run


def test_accelerate_a_resume_from_an_older_checkpoint_records_the_work_done_after_it_as_lost(tmp_path: Path) -> None:
    from accelerate import Accelerator
    from accelerate.utils import DataLoaderConfiguration
    from torch.utils.data import DataLoader, TensorDataset

    from tracker_core.integrations.accelerate import AcceleratorProgress

    def program() -> tuple[Accelerator, AcceleratorProgress, Any, Any, Any]:
        from accelerate.state import AcceleratorState, GradientState

        AcceleratorState._reset_state(True)
        GradientState._reset_state()
        # a StatefulDataLoader, so the resume goes on at batch 3 (a plain loader's epoch would be read whole)
        accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
        progress = AcceleratorProgress(accelerator, heartbeat=tmp_path / "heartbeat.json")
        accelerator.register_for_checkpointing(progress)
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        data = DataLoader(TensorDataset(torch.randn(12, 2), torch.randn(12, 1)), batch_size=2)
        model, optimizer, data = accelerator.prepare(model, optimizer, data)
        return accelerator, progress, model, optimizer, data

    def train(accelerator: Any, progress: Any, model: Any, optimizer: Any, data: Any, save_at: int | None) -> None:
        with progress.fit(1) as fit:
            for _ in fit.epochs():
                for batch, (x, y) in enumerate(progress.train(data), start=1):
                    optimizer.zero_grad()
                    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                    optimizer.step()
                    if batch == save_at:
                        accelerator.save_state(str(tmp_path / "checkpoints" / "at_2"))
                    if batch == 5 and save_at is not None:
                        return  # the fit ends here, 3 batches after its checkpoint

    first = program()
    (tmp_path / "checkpoints").mkdir()
    train(*first, save_at=2)
    assert (tmp_path / "heartbeat.json").exists()
    second = program()
    second[0].load_state(str(tmp_path / "checkpoints" / "at_2"))
    train(*second, save_at=None)
    ended, completed = _runs(second[1].view)
    assert ended["ended"] == "stopped_early" and ended["end"]["batches"] == 2  # as its heartbeat says (returned)
    assert (ended["lost"]["batches"], ended["lost"]["samples"]) == (3, 6)
    assert (completed["ended"], completed["start"]["batches"], completed["end"]["batches"]) == ("completed", 2, 6)
