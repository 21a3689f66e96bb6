"""Accelerator generators in the RNG snapshot: captured, validated and applied per device.

No GPU here: the device module is substituted by CPU generators standing in for each device's
(what ``tracker_core.data._device_rng.DEVICE_KINDS`` is for); the code paths are the CUDA ones.
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from tracker_core import ProgressStateError, Tracker
from tracker_core.data import _device_rng

from helpers.device_stand_in import CpuStandIn


@pytest.fixture
def cuda(monkeypatch: pytest.MonkeyPatch) -> CpuStandIn:
    devices = CpuStandIn(2)
    monkeypatch.setitem(_device_rng.DEVICE_KINDS, "cuda", devices)
    return devices


def test_a_cpu_only_machine_saves_no_device_part() -> None:
    assert "devices" not in Tracker().state_dict()["rng"]


def test_every_device_generator_continues_after_a_resume(cuda: CpuStandIn) -> None:
    entry = json.loads(json.dumps(Tracker().state_dict()))
    expected = cuda.draws()

    Tracker().load_state_dict(entry)

    assert len(entry["rng"]["devices"]["cuda"]) == 2
    assert cuda.draws() == expected


def test_a_checkpoint_from_more_devices_loads_with_a_warning_its_device_part_not_applied(
    cuda: CpuStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = Tracker().state_dict()
    expected = torch.rand(3)
    fewer = CpuStandIn(1)
    monkeypatch.setitem(_device_rng.DEVICE_KINDS, "cuda", fewer)
    before = fewer.generators[0].get_state()
    Tracker().validate_state_dict(entry)  # what inspect does: no error

    with pytest.warns(UserWarning, match="2 device.*this machine has 1 cuda device.*not applied"):
        Tracker().load_state_dict(entry)

    assert torch.equal(fewer.generators[0].get_state(), before)
    assert torch.equal(torch.rand(3), expected)  # the CPU generators are applied


def test_a_device_state_of_the_wrong_size_is_refused_naming_the_device(cuda: CpuStandIn) -> None:
    entry = Tracker().state_dict()
    entry["rng"]["devices"]["cuda"][1] = entry["rng"]["devices"]["cuda"][1][:-8]

    with pytest.raises(ProgressStateError, match=r"'rng\.devices\.cuda\.1'"):
        Tracker().load_state_dict(entry)


def test_an_unknown_device_kind_is_refused(cuda: CpuStandIn) -> None:
    entry = Tracker().state_dict()
    entry["rng"]["devices"]["tpu"] = entry["rng"]["devices"].pop("cuda")

    with pytest.raises(ProgressStateError, match=r"'rng\.devices\.tpu'"):
        Tracker().load_state_dict(entry)


def test_a_gpu_checkpoint_loads_on_a_cpu_only_machine_with_a_warning(
    cuda: CpuStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = Tracker().state_dict()
    absent = CpuStandIn(2, available=False)
    monkeypatch.setitem(_device_rng.DEVICE_KINDS, "cuda", absent)
    Tracker().validate_state_dict(entry)  # what inspect does: no warning, no error

    with pytest.warns(UserWarning, match="no cuda device: they are not applied"):
        Tracker().load_state_dict(entry)


def test_nothing_is_captured_from_a_device_kind_not_initialised(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(_device_rng.DEVICE_KINDS, "cuda", CpuStandIn(2, available=False))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "devices" not in Tracker().state_dict()["rng"]


def test_a_refused_device_state_applies_no_device_generator(cuda: CpuStandIn) -> None:
    entry = Tracker().state_dict()
    entry["rng"]["devices"]["cuda"][1] = entry["rng"]["devices"]["cuda"][1][:-8]
    cuda.draws()  # the generators move on from the saved states
    before = [g.get_state() for g in cuda.generators]

    with pytest.raises(ProgressStateError):
        Tracker().load_state_dict(entry)

    assert all(torch.equal(g.get_state(), state) for g, state in zip(cuda.generators, before, strict=True))


def test_every_initialised_device_kind_is_captured_and_continues(
    cuda: CpuStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    xpu, mps = CpuStandIn(3), CpuStandIn(1)
    monkeypatch.setitem(_device_rng.DEVICE_KINDS, "xpu", xpu)
    monkeypatch.setitem(_device_rng.DEVICE_KINDS, "mps", mps)
    entry = json.loads(json.dumps(Tracker().state_dict()))
    expected = (cuda.draws(), xpu.draws(), mps.draws())

    Tracker().load_state_dict(entry)

    assert {kind: len(states) for kind, states in entry["rng"]["devices"].items()} == {"cuda": 2, "xpu": 3, "mps": 1}
    assert (cuda.draws(), xpu.draws(), mps.draws()) == expected


def test_a_gpu_checkpoint_on_a_cpu_only_machine_still_applies_the_cpu_generators(
    cuda: CpuStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = Tracker().state_dict()
    expected = torch.rand(3)
    monkeypatch.setitem(_device_rng.DEVICE_KINDS, "cuda", CpuStandIn(2, available=False))

    with pytest.warns(UserWarning, match="2 device"):
        Tracker().load_state_dict(entry)

    assert torch.equal(torch.rand(3), expected)


def test_the_real_device_modules_capture_nothing_on_a_cpu_only_machine() -> None:
    if any(generators.is_available() for generators in _device_rng.DEVICE_KINDS.values()):
        pytest.skip("this machine has an accelerator")
    assert _device_rng.capture_devices() == {}


def test_the_accelerator_torch_reports_is_captured_beside_cuda_xpu_and_mps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device("hpu"))

    assert _device_rng._kinds() == ("cuda", "xpu", "mps", "hpu")


def test_a_device_kind_torch_has_no_module_for_is_not_available() -> None:
    assert not _device_rng._TorchDeviceModule("hpu").is_available()
