"""``progress-tracker inspect`` shows the accelerator generators an entry holds (kinds, device count, state
sizes) and whether a resume on this machine applies them. No GPU here: the entries' device part is
written by CPU generators standing in for 2 CUDA devices (``helpers/device_stand_in.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tracker_core import Tracker
from tracker_core.cli import main
from tracker_core.data import _device_rng

from helpers.device_stand_in import CpuStandIn

CPU_GENERATOR_BYTES = torch.Generator().get_state().numel()  # what each stand-in device's state holds


@pytest.fixture
def gpu_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A plain-loop checkpoint saved where 2 CUDA devices were initialised; afterwards this machine has none."""
    monkeypatch.setitem(_device_rng.DEVICE_KINDS, "cuda", CpuStandIn(2))
    path = tmp_path / "gpu.pt"
    torch.save({"progress_tracker": Tracker().state_dict()}, path)
    monkeypatch.setitem(_device_rng.DEVICE_KINDS, "cuda", CpuStandIn(2, available=False))
    return path


def _inspect(path: Path, capsys: pytest.CaptureFixture[str], *options: str) -> str:
    assert main(["inspect", str(path), *options]) == 0
    return capsys.readouterr().out


def test_inspect_on_a_cpu_only_machine_reports_the_saved_cuda_generators_as_not_applied(
    gpu_checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _inspect(gpu_checkpoint, capsys).splitlines()[-1]

    assert line == (
        f"device RNG: cuda, 2 devices, generator state {CPU_GENERATOR_BYTES} bytes each; reported, not applied: "
        "this machine has no cuda device (a resume here warns)"
    )


def test_inspect_json_gives_each_device_kind_its_count_state_sizes_and_whether_applied_here(
    gpu_checkpoint: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = json.loads(_inspect(gpu_checkpoint, capsys, "--json"))

    expected = [
        {
            "kind": "cuda",
            "devices": 2,
            "state_bytes": [CPU_GENERATOR_BYTES] * 2,
            "devices_here": 0,
            "applied_here": False,
        }
    ]
    assert data["device_rng"] == data["ranks"][0]["device_rng"] == expected


def test_inspect_on_a_machine_with_the_devices_says_a_resume_applies_them(
    gpu_checkpoint: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(_device_rng.DEVICE_KINDS, "cuda", CpuStandIn(2))

    assert _inspect(gpu_checkpoint, capsys).splitlines()[-1].endswith("each; applied on resume here")


def test_inspect_on_a_machine_with_fewer_devices_reports_the_saved_ones_instead_of_refusing(
    gpu_checkpoint: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(_device_rng.DEVICE_KINDS, "cuda", CpuStandIn(1))

    assert _inspect(gpu_checkpoint, capsys).splitlines()[-1] == (
        f"device RNG: cuda, 2 devices, generator state {CPU_GENERATOR_BYTES} bytes each; reported, not applied: "
        "this machine has 1 cuda device (a resume here warns)"
    )
    facts = json.loads(_inspect(gpu_checkpoint, capsys, "--json"))["device_rng"]
    assert [(f["devices"], f["devices_here"], f["applied_here"]) for f in facts] == [(2, 1, False)]


def test_inspect_of_a_cpu_only_checkpoint_says_no_device_generators_were_saved(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cpu.pt"
    torch.save({"progress_tracker": Tracker().state_dict()}, path)

    assert _inspect(path, capsys).splitlines()[-1] == "device RNG: none saved (no accelerator was initialised)"
    assert json.loads(_inspect(path, capsys, "--json"))["device_rng"] == []
