"""A core-only install (torch alone): the core imports and runs, a missing extra names itself, framework tests skip.

Each test runs a child python in which a meta-path finder refuses the frameworks, torchdata, rich and numpy, as
if only ``pip install tracker-core`` (torch) had been installed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ABSENT = ("pytorch_lightning", "lightning", "ignite", "accelerate", "torchdata", "rich", "numpy")
_BLOCKER = f"""
import sys
import warnings

_ABSENT = {ABSENT!r}


class _Absent:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in _ABSENT:
            raise ModuleNotFoundError(f"No module named {{name!r}} (absent from a core-only install)", name=name)
        return None


assert not [name for name in sys.modules if name.partition(".")[0] in _ABSENT], "imported before the blocker"
sys.meta_path.insert(0, _Absent())
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
"""


def _run_core_only(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _BLOCKER + code, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_the_core_imports_without_frameworks_torchdata_rich_or_numpy() -> None:
    result = _run_core_only(
        "import tracker_core, tracker_core.adapter, tracker_core.checkpoints\n"
        "from tracker_core.cli import main\n"
        "print(sorted(name for name in sys.modules if name.partition('.')[0] in _ABSENT))\n"
        "print(tracker_core.__version__)\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "[]"


_ROUND_TRIP = """
import json

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, "tests")
from helpers.core_drive import hand_fit
from tracker_core import Tracker


def fit(entry=None, stop_after_epochs=None):
    torch.manual_seed(0)
    loader = DataLoader(torch.arange(10), batch_size=2, shuffle=True)
    tracker = Tracker()
    tracker.track_train_loader(loader)
    if entry is not None:
        tracker.load_state_dict(entry)
    stop = lambda: tracker.view.train.epochs.lifetime.completed == stop_after_epochs  # a plain DataLoader
    seen = hand_fit(tracker, loader, 2, lambda batch: batch.tolist(), after_epoch=stop)
    if stop():
        return seen, json.loads(json.dumps(tracker.state_dict()))
    return seen, tracker.state_dict()["progress"]


straight, straight_progress = fit()
first, entry = fit(stop_after_epochs=1)
rest, resumed_progress = fit(entry=entry)
assert first + rest == straight, (first, rest, straight)


def untimed(stages):
    return {name: {k: v for k, v in stage.items() if k != "microseconds"} for name, stage in stages.items()}


assert untimed(resumed_progress["stages"]) == untimed(straight_progress["stages"])  # times differ: a real clock
print("round trip", len(straight))
"""


def test_a_hand_driven_fit_resumed_between_epochs_sees_the_same_samples_without_frameworks() -> None:
    result = _run_core_only(_ROUND_TRIP)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "round trip 20"


@pytest.mark.parametrize("extra", ["lightning", "ignite", "accelerate"])
def test_an_adapter_without_its_framework_raises_import_error_naming_the_extra(extra: str) -> None:
    result = _run_core_only(
        f"try:\n    import tracker_core.integrations.{extra}\n"
        "except ImportError as error:\n    print(error)\nelse:\n    print('imported')\n"
    )
    assert result.returncode == 0, result.stderr
    assert f'pip install "tracker-core[{extra}]"' in result.stdout


def test_every_test_module_collects_or_skips_cleanly_without_frameworks() -> None:
    result = _run_core_only(
        "import pytest\nsys.exit(pytest.main(sys.argv[1:]))\n",
        "--collect-only",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        "-rs",
        "tests",
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "error" not in result.stdout.lower().splitlines()[-1], result.stdout[-4000:]
    assert "SKIPPED" in result.stdout and "could not import 'pytorch_lightning'" in result.stdout
