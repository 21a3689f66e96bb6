"""How leaving ``progress.epochs()`` ends the Accelerate fit's ledger entry, and its heartbeat from the fit's start.

Running out of epochs completes the run; a ``break`` or ``return`` before its last epoch is done stops it early
(as Lightning's ``should_stop`` and Ignite's ``terminate()``); an exception out of the loop body crashes it,
Ctrl-C (the ``KeyboardInterrupt`` the SIGINT handler raises) interrupts it.
The heartbeat goes only to the file the program names (``heartbeat=``), from the fit's start, before any save.
"""

from __future__ import annotations

import contextlib
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

    def batches(self) -> Iterator[Any]:
        """The train pass of the current epoch: each batch is trained (one optimizer step), then given to the body."""
        for x, y in self.progress.train(self.data):
            self.optimizer.zero_grad()
            self.accelerator.backward(torch.nn.functional.mse_loss(self.model(x), y))
            self.optimizer.step()
            yield x, y

    def ended(self) -> list[str]:
        return [run["ended"] for run in self.progress.view.state_dict()["ledger"]["runs"]]


def _fail() -> None:
    raise RuntimeError("in the step")


def test_a_fit_that_runs_out_of_epochs_completes() -> None:
    program = Program()
    for _ in program.progress.epochs(2):
        for _ in program.batches():
            pass
    assert program.ended() == ["completed"]


def test_a_break_after_the_last_epoch_body_completes() -> None:
    program = Program()
    for epoch in program.progress.epochs(2):
        for _ in program.batches():
            pass
        if epoch == 1:
            break
    assert program.ended() == ["completed"]


def test_a_break_before_the_last_epoch_stops_early() -> None:
    program = Program()
    for epoch in program.progress.epochs(3):
        for _ in program.batches():
            pass
        if epoch == 0:
            break
    assert program.ended() == ["stopped_early"]
    assert program.progress.view.state_dict()["ledger"]["runs"][0]["end"]["batches"] == 4


def test_a_return_from_the_middle_of_the_last_epoch_stops_early() -> None:
    program = Program()

    def fit() -> None:
        for _ in program.progress.epochs(1):
            for batch, _ in enumerate(program.batches(), start=1):
                if batch == 3:
                    return

    fit()
    assert program.ended() == ["stopped_early"]


def _divide_by_zero_in_the_body(program: Program) -> None:
    for _ in program.progress.epochs(2):
        for batch, _ in enumerate(program.batches()):
            print(batch / 0)


def _call_a_failing_step(program: Program) -> None:
    for _ in program.progress.epochs(2):
        for _ in program.batches():
            _fail()


def _interrupt(program: Program) -> None:
    for _ in program.progress.epochs(2):
        raise KeyboardInterrupt


def test_an_exception_out_of_the_loop_body_crashes_the_run() -> None:
    program = Program()
    with pytest.raises(ZeroDivisionError):
        _divide_by_zero_in_the_body(program)
    assert program.ended() == ["crashed"]


def test_an_exception_raised_in_a_function_the_body_calls_crashes_the_run() -> None:
    program = Program()
    with pytest.raises(RuntimeError, match="in the step"):
        _call_a_failing_step(program)
    assert program.ended() == ["crashed"]


def test_a_keyboard_interrupt_the_program_raises_itself_crashes_the_run_as_python_shows_the_loop_no_type() -> None:
    program = Program()
    with pytest.raises(KeyboardInterrupt):
        _interrupt(program)
    assert program.ended() == ["crashed"]


def _press_ctrl_c_in_the_second_batch(program: Program) -> None:
    for _ in program.progress.epochs(2):
        for batch, _ in enumerate(program.batches()):
            if batch == 1:
                os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C sends; Python's handler raises KeyboardInterrupt


def test_ctrl_c_in_the_train_loop_interrupts_the_run_and_its_keyboard_interrupt_goes_on() -> None:
    program = Program()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt) as raised:
        _press_ctrl_c_in_the_second_batch(program)
    assert type(raised.value) is KeyboardInterrupt
    (fit,) = program.progress.view.state_dict()["ledger"]["runs"]
    assert (fit["ended"], fit["end"]["batches"]) == ("interrupted", 2)  # the second batch had trained (its step)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is Python's again


class _OwnInterrupt(KeyboardInterrupt):
    pass


def test_ctrl_c_runs_the_programs_own_handler_and_its_exception_goes_on_unchanged() -> None:
    own = _OwnInterrupt("from the program's handler")

    def handler(signum: int, frame: object) -> None:
        raise own

    previous = signal.signal(signal.SIGINT, handler)
    try:
        program = Program()
        with pytest.raises(_OwnInterrupt) as raised:
            _press_ctrl_c_in_the_second_batch(program)
        assert raised.value is own
        assert program.ended() == ["interrupted"]
        assert signal.getsignal(signal.SIGINT) is handler
    finally:
        signal.signal(signal.SIGINT, previous)


def _fail_after_a_caught_ctrl_c(program: Program) -> None:
    for _ in program.progress.epochs(2):
        for batch, _ in enumerate(program.batches()):
            if batch == 1:
                with contextlib.suppress(KeyboardInterrupt):  # the program goes on
                    os.kill(os.getpid(), signal.SIGINT)
            if batch == 2:
                _fail()


def test_an_exception_after_a_ctrl_c_the_loop_body_caught_crashes_the_run() -> None:
    program = Program()
    with pytest.raises(RuntimeError, match="in the step"):
        _fail_after_a_caught_ctrl_c(program)
    assert program.ended() == ["crashed"]


def test_a_handler_the_program_sets_during_the_fit_stays_after_it() -> None:
    program = Program()

    def handler(signum: int, frame: object) -> None:
        pass

    try:
        for _ in program.progress.epochs(1):
            signal.signal(signal.SIGINT, handler)
        assert signal.getsignal(signal.SIGINT) is handler
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    assert program.ended() == ["completed"]


def test_the_wrapper_a_program_kept_during_the_fit_and_puts_back_later_still_raises_keyboard_interrupt() -> None:
    program = Program()
    for _ in program.progress.epochs(1):
        kept = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a library sets its own and keeps the wrapper
    try:
        signal.signal(signal.SIGINT, kept)  # ... and puts it back after the fit
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
        for _ in program.progress.epochs(1):  # a new fit finds the wrapper in force: no wrapper of a wrapper
            pass
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _shown(epochs: Iterator[int]) -> Iterator[int]:
    """A generator over the epochs loop, as ``tqdm(progress.epochs(n))`` is."""
    try:
        yield from epochs
    finally:
        pass


def _fail_in_a_shown_loop(program: Program) -> None:
    for _ in _shown(program.progress.epochs(2)):
        _fail()


def test_a_break_out_of_a_generator_over_the_loop_stops_early() -> None:
    program = Program()
    for _ in _shown(program.progress.epochs(2)):
        break
    assert program.ended() == ["stopped_early"]


def test_an_exception_through_a_generator_over_the_loop_crashes_the_run() -> None:
    program = Program()
    with pytest.raises(RuntimeError, match="in the step"):
        _fail_in_a_shown_loop(program)
    assert program.ended() == ["crashed"]


def _press_ctrl_c_in_a_shown_loop(program: Program) -> None:
    for _ in _shown(program.progress.epochs(2)):
        os.kill(os.getpid(), signal.SIGINT)


def test_ctrl_c_through_a_generator_over_the_loop_interrupts_the_run() -> None:
    program = Program()
    with pytest.raises(KeyboardInterrupt):
        _press_ctrl_c_in_a_shown_loop(program)
    assert program.ended() == ["interrupted"]


def test_a_held_loop_whose_function_returns_stops_early() -> None:
    program = Program()

    def hold() -> None:
        epochs = program.progress.epochs(2)
        next(epochs)

    hold()
    assert program.ended() == ["stopped_early"]


def test_a_held_loop_that_a_new_epochs_loop_replaces_ended_stopped_early() -> None:
    program = Program()
    held = program.progress.epochs(3)
    next(held)
    for _ in program.progress.epochs(3):
        pass
    assert program.ended()[0] == "stopped_early"


def _save_then_fail(program: Program) -> None:
    for _ in program.progress.epochs(2):
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
    for _ in program.progress.epochs(1):
        beat = json.loads((tmp_path / "beat.json").read_text())
        assert beat["entries"][-1]["ended"] == "running"
        break
    assert not (tmp_path / "project").exists()


def test_without_a_heartbeat_file_a_resume_records_the_crashed_runs_lost_work_as_unknown(tmp_path: Path) -> None:
    first = Program(tmp_path)
    with pytest.raises(RuntimeError):
        _save_then_fail(first)
    resumed = Program(tmp_path)
    resumed.accelerator.load_state()
    for _ in resumed.progress.epochs(2):
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
program.accelerator.load_state()  # the newest checkpoint of the first process
for _ in program.progress.epochs(2):
    for _ in program.batches():
        os.kill(os.getpid(), signal.SIGKILL)  # its first batch trained (a beat at its step), not saved
"""


def test_a_resumed_process_killed_before_its_first_save_is_in_the_next_resume_ledger(tmp_path: Path) -> None:
    beat = tmp_path / "beat.json"
    first = Program(tmp_path / "project", heartbeat=beat)
    for _ in first.progress.epochs(2):
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
    last.accelerator.load_state()
    for _ in last.progress.epochs(2):
        for _ in last.batches():
            pass
    stopped, unsaved, completed = last.progress.view.state_dict()["ledger"]["runs"]
    assert (stopped["ended"], stopped["end"]["batches"], stopped["lost"]["batches"]) == ("stopped_early", 2, 1)
    assert (unsaved["ended"], unsaved["start"]["batches"], unsaved["end"]["batches"]) == ("crashed", 2, 2)
    assert (unsaved["lost"]["steps"], unsaved["lost"]["batches"]) == (1, 0)  # its step beat; the kill cut its batch
    assert (completed["ended"], completed["start"]["batches"], completed["end"]["batches"]) == ("completed", 2, 8)
