"""How leaving ``with progress.fit(n)`` ends the Accelerate fit's ledger entry, and its heartbeat from the fit's start.

Running out of epochs completes the run; leaving the block without an exception before its last epoch is done stops
it early (as Lightning's ``should_stop`` and Ignite's ``terminate()``); a ``KeyboardInterrupt`` out of the block (Ctrl-C,
or one the program raises) interrupts it, any other exception crashes it.
The heartbeat goes only to the file the program names (``heartbeat=``), from the fit's start, before any save.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("accelerate")

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from accelerate.utils import ProjectConfiguration
from torch.utils.data import DataLoader, TensorDataset

from tracker_core.integrations.accelerate import AcceleratorProgress

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _beat_at_every_step(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACKER_HEARTBEAT_SECONDS", "0")


class Program:
    """Linear(2, 1) on 8 samples in batches of 2 (4 batches an epoch), one optimizer step a batch."""

    def __init__(self, project_dir: Path | None = None, heartbeat: Path | None = None) -> None:
        AcceleratorState._reset_state(True)
        GradientState._reset_state()
        config = (
            None if project_dir is None else ProjectConfiguration(str(project_dir), automatic_checkpoint_naming=True)
        )
        self.accelerator = Accelerator(cpu=True, project_config=config)
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        data = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
        self.model, self.optimizer, self.data = self.accelerator.prepare(model, optimizer, data)
        self.progress = AcceleratorProgress(self.accelerator, heartbeat=heartbeat)
        self.accelerator.register_for_checkpointing(self.progress)

    def batches(self) -> Iterator[Any]:
        """The train pass of the current epoch: each batch is trained (one optimizer step), then given to the body."""
        for x, y in self.progress.train(self.data):
            self.optimizer.zero_grad()
            self.accelerator.backward(torch.nn.functional.mse_loss(self.model(x), y))
            self.optimizer.step()
            yield x, y

    def load(self) -> None:
        """Load the newest checkpoint; automatic naming's next save follows it."""
        self.accelerator.load_state()
        self.accelerator.project_configuration.iteration = self.progress.next_save_iteration

    def ended(self) -> list[str]:
        return [run["ended"] for run in self.progress.view.state_dict()["ledger"]["runs"]]


def _fail() -> None:
    raise RuntimeError("in the step")


def test_a_fit_that_runs_out_of_epochs_completes() -> None:
    program = Program()
    with program.progress.fit(2) as fit:
        for _ in fit.epochs():
            for _ in program.batches():
                pass
    assert program.ended() == ["completed"]


def test_a_break_after_the_last_epoch_body_completes() -> None:
    program = Program()
    with program.progress.fit(2) as fit:
        for epoch in fit.epochs():
            for _ in program.batches():
                pass
            if epoch == 1:
                break
    assert program.ended() == ["completed"]


def test_a_break_before_the_last_epoch_stops_early() -> None:
    program = Program()
    with program.progress.fit(3) as fit:
        for epoch in fit.epochs():
            for _ in program.batches():
                pass
            if epoch == 0:
                break
    assert program.ended() == ["stopped_early"]
    assert program.progress.view.state_dict()["ledger"]["runs"][0]["end"]["batches"] == 4


def test_a_return_from_the_middle_of_the_last_epoch_stops_early() -> None:
    program = Program()

    def fit() -> None:
        with program.progress.fit(1) as run:
            for _ in run.epochs():
                for batch, _ in enumerate(program.batches(), start=1):
                    if batch == 3:
                        return

    fit()
    assert program.ended() == ["stopped_early"]


@pytest.mark.parametrize("fits_before", [0, 1], ids=["first-fit", "after-a-completed-fit"])
def test_a_fit_left_before_its_first_epoch_stops_early(fits_before: int) -> None:
    program = Program()
    for _ in range(fits_before):
        with program.progress.fit(1) as fit:
            for _ in fit.epochs():
                for _ in program.batches():
                    pass
    with program.progress.fit(2):
        pass
    assert program.ended() == ["completed"] * fits_before + ["stopped_early"]


def test_the_run_is_completed_when_the_last_epoch_ends_before_the_block_is_left() -> None:
    program = Program()
    with program.progress.fit(1) as fit:
        for _ in fit.epochs():
            for _ in program.batches():
                pass
        assert program.ended() == ["completed"]


def _divide_by_zero_in_the_body(program: Program) -> None:
    with program.progress.fit(2) as fit:
        for _ in fit.epochs():
            for batch, _ in enumerate(program.batches()):
                print(batch / 0)


def _call_a_failing_step(program: Program) -> None:
    with program.progress.fit(2) as fit:
        for _ in fit.epochs():
            for _ in program.batches():
                _fail()


def _fail_after_the_epochs_loop(program: Program) -> None:
    with program.progress.fit(2) as fit:
        for _ in fit.epochs():
            break
        _fail()


def _interrupt(program: Program) -> None:
    with program.progress.fit(2) as fit:
        for _ in fit.epochs():
            raise KeyboardInterrupt


def _press_ctrl_c_in_the_second_batch(program: Program) -> None:
    with program.progress.fit(2) as fit:
        for _ in fit.epochs():
            for batch, _ in enumerate(program.batches()):
                if batch == 1:
                    os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends; Python's handler raises it


def _fail_before_the_second_step(program: Program) -> None:
    with program.progress.fit(1) as fit:
        for _ in fit.epochs():
            for batch, _ in enumerate(fit.train(program.data)):
                if batch == 1:
                    _fail()  # before the batch's step


def test_an_exception_out_of_the_block_crashes_the_run() -> None:
    program = Program()
    with pytest.raises(ZeroDivisionError):
        _divide_by_zero_in_the_body(program)
    assert program.ended() == ["crashed"]


def test_an_exception_raised_in_a_function_the_body_calls_crashes_the_run() -> None:
    program = Program()
    with pytest.raises(RuntimeError, match="in the step"):
        _call_a_failing_step(program)
    assert program.ended() == ["crashed"]


def test_an_exception_after_the_epochs_loop_was_left_crashes_the_run() -> None:
    program = Program()
    with pytest.raises(RuntimeError, match="in the step"):
        _fail_after_the_epochs_loop(program)
    assert program.ended() == ["crashed"]


def test_a_keyboard_interrupt_the_program_raises_itself_interrupts_the_run() -> None:
    program = Program()
    with pytest.raises(KeyboardInterrupt):
        _interrupt(program)
    assert program.ended() == ["interrupted"]


@pytest.fixture
def _pythons_sigint_handler() -> Iterator[None]:
    """SIGINT handled as Python handles it in a program started from a terminal (a background job inherits it
    ignored)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("_pythons_sigint_handler")
def test_ctrl_c_in_the_train_loop_interrupts_the_run_and_its_keyboard_interrupt_goes_on() -> None:
    program = Program()
    with pytest.raises(KeyboardInterrupt) as raised:
        _press_ctrl_c_in_the_second_batch(program)
    assert type(raised.value) is KeyboardInterrupt
    (run,) = program.progress.view.state_dict()["ledger"]["runs"]
    assert (run["ended"], run["end"]["batches"]) == ("interrupted", 2)  # the second batch had trained (its step)


@pytest.mark.usefixtures("_pythons_sigint_handler")
def test_the_fit_leaves_the_sigint_handler_alone() -> None:
    program = Program()
    with program.progress.fit(1) as fit:
        for _ in fit.epochs():
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_batch_the_exception_left_untrained_is_not_counted() -> None:
    program = Program()
    with pytest.raises(RuntimeError, match="in the step"):
        _fail_before_the_second_step(program)
    (run,) = program.progress.view.state_dict()["ledger"]["runs"]
    assert (run["ended"], run["end"]["batches"]) == ("crashed", 1)


def test_a_fit_left_open_ends_stopped_early_when_a_new_fit_begins() -> None:
    program = Program()
    held = program.progress.fit(3).__enter__()
    next(held.epochs())
    with program.progress.fit(3) as fit:
        for _ in fit.epochs():
            pass
    assert program.ended()[0] == "stopped_early"


def test_epochs_outside_the_with_block_are_not_counted_and_noted() -> None:
    program = Program()
    with pytest.warns(RuntimeWarning, match="outside its with block"):
        assert list(program.progress.fit(2).epochs()) == [0, 1]
    assert program.progress.view.epoch_index == 0
    assert program.ended() == []


def _save_then_fail(program: Program) -> None:
    with program.progress.fit(2) as fit:
        for _ in fit.epochs():
            for _ in program.batches():
                program.accelerator.save_state()
                _fail()


def test_a_crashed_run_says_so_in_its_heartbeat(tmp_path: Path) -> None:
    program = Program(tmp_path / "project", heartbeat=tmp_path / "beat.json")
    with pytest.raises(RuntimeError):
        _save_then_fail(program)
    beat = json.loads((tmp_path / "beat.json").read_text())
    assert [entry["ended"] for entry in beat["entries"]] == ["crashed"]


def test_the_fit_beats_into_the_named_file_from_its_start_before_any_save(tmp_path: Path) -> None:
    program = Program(tmp_path / "project", heartbeat=tmp_path / "beat.json")
    with program.progress.fit(1):
        beat = json.loads((tmp_path / "beat.json").read_text())
        assert beat["entries"][-1]["ended"] == "running"
    assert not (tmp_path / "project").exists()


def test_without_a_heartbeat_file_a_resume_records_the_crashed_runs_lost_work_as_unknown(tmp_path: Path) -> None:
    first = Program(tmp_path)
    with pytest.raises(RuntimeError):
        _save_then_fail(first)
    resumed = Program(tmp_path)
    resumed.load()
    with resumed.progress.fit(2) as fit:
        for _ in fit.epochs():
            for _ in resumed.batches():
                pass
    crashed = resumed.progress.view.state_dict()["ledger"]["runs"][0]
    assert (crashed["ended"], crashed["lost"]) == ("crashed", "unknown")
    assert sorted(os.listdir(tmp_path)) == ["checkpoints"]


_KILLED = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from test_accelerate_ledger import Program
program = Program(Path({folder!r}), heartbeat=Path({beat!r}))
program.load()  # the newest checkpoint of the first process
with program.progress.fit(2) as fit:
    for _ in fit.epochs():
        for _ in program.batches():
            os.kill(os.getpid(), signal.SIGKILL)  # its first batch trained (a beat at its step), not saved
"""


def test_a_resumed_process_killed_before_its_first_save_is_in_the_next_resume_ledger(tmp_path: Path) -> None:
    beat = tmp_path / "beat.json"
    first = Program(tmp_path / "project", heartbeat=beat)
    with first.progress.fit(2) as fit:
        for _ in fit.epochs():
            for batch, _ in enumerate(first.batches(), start=1):
                if batch == 2:
                    first.accelerator.save_state()  # 2 batches
                if batch == 3:
                    break  # 1 batch after the checkpoint
            break
    script = textwrap.dedent(_KILLED).format(
        tests=str(ROOT / "tests"), folder=str(tmp_path / "project"), beat=str(beat)
    )
    killed = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env={**os.environ}, capture_output=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()[-2000:]
    last = Program(tmp_path / "project", heartbeat=beat)
    last.load()
    with last.progress.fit(2) as fit:
        for _ in fit.epochs():
            for _ in last.batches():
                pass
    stopped, unsaved, completed = last.progress.view.state_dict()["ledger"]["runs"]
    assert (stopped["ended"], stopped["end"]["batches"], stopped["lost"]["batches"]) == ("stopped_early", 2, 1)
    assert (unsaved["ended"], unsaved["start"]["batches"], unsaved["end"]["batches"]) == ("crashed", 2, 2)
    assert (unsaved["lost"]["steps"], unsaved["lost"]["batches"]) == (1, 0)  # its step beat; the kill cut its batch
    # the plain loader was saved inside its pass: the resumed epoch restarts, read whole (2 + 4 + 4 batches)
    assert (completed["ended"], completed["start"]["batches"], completed["end"]["batches"]) == ("completed", 2, 10)
