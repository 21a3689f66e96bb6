"""The display as people see it: a real terminal (a pseudo-terminal, replayed on a grid) and a plain log file."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("ignite")
pytest.importorskip("rich")

from helpers.screen import run_in_terminal, screen

_TESTS = Path(__file__).parent
_LINE = re.compile(r"^(train|validate) +\| epoch (\d)/(\d) \| batch (\d+)/(\d+) \| steps (\d+)(?: \| (.*))?$")


def _run(framework: str) -> list[str]:
    return [sys.executable, "-m", "helpers.display_screen_run", framework]


def _display_lines(lines: list[str]) -> list[tuple[str, ...]]:
    """(stage, epoch, rest) of every line that starts as a display line."""
    found = []
    for line in lines:
        match = _LINE.match(line)
        if match is not None:
            found.append((match.group(1), match.group(2), match.group(7) or ""))
    return found


def _lightning_lines_are_right(lines: list[str]) -> None:
    assert not [line for line in lines if "Traceback" in line or "Error" in line]
    shown = _display_lines(lines)
    assert [(stage, epoch) for stage, epoch, _ in shown] == [
        ("train", "1"),
        ("validate", "1"),
        ("train", "2"),
        ("validate", "2"),
    ]
    assert all(rest.endswith(("loss=0.25", "loss=0.25, val_loss=0.5")) for _, _, rest in shown)
    assert shown[1][2].endswith("val_loss=0.5")
    train = [rest for stage, _, rest in shown if stage == "train"]
    assert all("samples/s | ETA 0:00:0" in rest for rest in train)  # rate and ETA within epochs of half a second


def test_lightning_fit_on_a_terminal_keeps_each_epochs_line_in_order_and_clears_the_live_bar() -> None:
    output = run_in_terminal(_run("lightning"), _TESTS)
    lines = screen(output)
    _lightning_lines_are_right(lines)
    # the live line of the first epoch (8 batches of 50 ms) has rate and ETA well before its end
    assert re.search(r"epoch 1/2 \| batch [2-6]/8 \| steps \d \| [\d.]+ samples/s \| ETA 0:00:0\d", output)
    assert not [line for line in lines if "━" in line]  # the live line was drawn and taken away
    assert lines[-2:] == ["`Trainer.fit` stopped: `max_epochs=2` reached.", ""]


def test_lightning_fit_writing_to_a_log_file_prints_plain_lines() -> None:
    done = subprocess.run(_run("lightning"), cwd=_TESTS, capture_output=True, text=True, timeout=240, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "\x1b" not in done.stdout and "\r" not in done.stdout
    assert "Traceback" not in done.stderr
    _lightning_lines_are_right(done.stdout.splitlines())


def test_ignite_run_beside_ignites_tqdm_bar_on_a_terminal_keeps_whole_lines() -> None:
    output = run_in_terminal(_run("ignite"), _TESTS)
    assert "Epoch [1/3]" in output  # Ignite's bar was drawn (and cleared at each epoch's end)
    lines = screen(output)
    assert not [line for line in lines if "Traceback" in line or "Error" in line]
    shown = _display_lines(lines)
    assert [(stage, epoch) for stage, epoch, _ in shown] == [
        (stage, epoch) for epoch in "123" for stage in ("train", "validate")
    ]
    assert all(re.search(r"\| loss=[0-9.e-]+$", rest) for stage, _, rest in shown if stage == "train")
    assert len([line for line in lines if "| epoch" in line]) == len(shown)  # no line shares a row with the bar
