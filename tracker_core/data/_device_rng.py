"""Accelerator generators (CUDA, XPU, MPS, and the accelerator ``torch.accelerator`` reports), one state per device:
captured for initialised kinds only (capturing would initialise them), validated, applied (docs/resume.md)."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Collection, Iterator, Mapping
from typing import Any, Protocol, cast

import torch

from tracker_core._errors import ProgressStateError
from tracker_core.state._codec import tensor_to_text, text_to_byte_tensor, text_to_bytes
from tracker_core.state._readers import join_key


class DeviceGenerators(Protocol):
    """The per-device generators of one device kind (a torch device module such as ``torch.cuda``)."""

    def is_available(self) -> bool: ...
    def is_initialized(self) -> bool: ...
    def device_count(self) -> int: ...
    def get_rng_state(self, device: int) -> torch.Tensor: ...
    def set_rng_state(self, state: torch.Tensor, device: int) -> None: ...


class _TorchDeviceModule:
    """A torch device module (``torch.cuda``, ``torch.xpu``, ``torch.mps``, a backend's) behind
    :class:`DeviceGenerators` (MPS has one device)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    @functools.cached_property
    def _module(self) -> Any:
        """The device module, or None; looked up once, as every resume asks each kind whether it is initialised."""
        try:
            return torch.get_device_module(self.kind)
        except (RuntimeError, AttributeError):
            return None

    def is_available(self) -> bool:
        module = self._module
        return module is not None and bool(module.is_available())

    def is_initialized(self) -> bool:
        initialized = getattr(self._module, "is_initialized", None)  # asked first: a fiftieth of is_available's cost
        return (initialized is None or bool(initialized())) and self.is_available()

    def device_count(self) -> int:
        return int(self._module.device_count()) if self.kind != "mps" else 1

    def get_rng_state(self, device: int) -> torch.Tensor:
        return cast("torch.Tensor", self._module.get_rng_state(*self._device(device)))

    def set_rng_state(self, state: torch.Tensor, device: int) -> None:
        self._module.set_rng_state(state, *self._device(device))

    def _device(self, device: int) -> tuple[int, ...]:
        """The device argument of the module's RNG calls: none for MPS, which has one device."""
        return () if self.kind == "mps" else (device,)


def _kinds() -> tuple[str, ...]:
    """CUDA, XPU, MPS, and the current accelerator when it is another kind (e.g. a backend's ``privateuse1``)."""
    kinds = ("cuda", "xpu", "mps")
    current = torch.accelerator.current_accelerator()
    return kinds if current is None or current.type in kinds else (*kinds, current.type)


DEVICE_KINDS: dict[str, DeviceGenerators] = {kind: _TorchDeviceModule(kind) for kind in _kinds()}
"""The device kinds captured, by name; tests substitute an entry to exercise these paths without a GPU."""


DeviceStates = dict[str, tuple[torch.Tensor, ...]]
"""The generator state of every device of each kind, by kind (index = device)."""


def capture_devices() -> DeviceStates:
    """The states of every initialised device kind (nothing on a CPU-only machine)."""
    return {
        kind: tuple(generators.get_rng_state(i).clone() for i in range(generators.device_count()))
        for kind, generators in DEVICE_KINDS.items()
        if generators.is_initialized()
    }


def apply_devices(saved: DeviceStates) -> None:
    """Set each saved device kind's generators; a kind this machine lacks, or has another number of, is reported
    with a warning and not applied."""
    for kind, states in saved.items():
        count = _devices_here(kind)
        if count != len(states):
            here = f"{count} {kind} device(s)" if count else f"no {kind} device"
            warnings.warn(
                f"the checkpoint holds {kind} generator states of {len(states)} device(s), but this "
                f"machine has {here}: they are not applied, so random draws on such a device "
                "would not continue as in the saved run",
                UserWarning,
                stacklevel=3,
            )
            continue
        for device, state in enumerate(states):
            DEVICE_KINDS[kind].set_rng_state(state, device)


def _devices_here(kind: str) -> int:
    """How many devices of ``kind`` this machine has (0 for a kind unknown here)."""
    generators = DEVICE_KINDS.get(kind)
    return generators.device_count() if generators is not None and generators.is_available() else 0


def devices_to_plain(saved: DeviceStates) -> dict[str, list[str]]:
    """``{kind: [base64 state per device]}``."""
    return {kind: [tensor_to_text(state) for state in states] for kind, states in saved.items()}


def devices_from_plain(value: object, key: str) -> DeviceStates:
    """Validate ``{kind: [base64, ...]}``, changing nothing: each state of a kind present here must have its
    generator's size; a kind absent here, or saved by another number of devices, is reported, not applied."""
    found: DeviceStates = {}
    for kind, kind_key, states in _saved_kinds(value, key, known=DEVICE_KINDS):
        tensors = tuple(text_to_byte_tensor(state, join_key(kind_key, str(i))) for i, state in enumerate(states))
        count = _devices_here(kind)
        if count:
            for i, tensor in enumerate(tensors):
                size = DEVICE_KINDS[kind].get_rng_state(i if i < count else 0).numel()
                if tensor.numel() != size:
                    raise ProgressStateError(
                        join_key(kind_key, str(i)), f"a {kind} generator state has {size} bytes, got {tensor.numel()}"
                    )
        found[kind] = tensors
    return found


def device_rng_facts(rng: object) -> list[dict[str, Any]]:
    """The accelerator part of a saved entry's ``rng``, one item per device kind, as ``progress-tracker inspect
    --json`` shows it (docs/cli.md, ``device_rng``). ``ProgressStateError`` names the key of a damaged state."""
    devices = rng.get("devices") if isinstance(rng, Mapping) else None
    if devices is None:
        return []
    found = []
    for kind, key, states in _saved_kinds(devices, "rng.devices"):
        here = _devices_here(kind)
        found.append(
            {
                "kind": kind,
                "devices": len(states),
                "state_bytes": [len(text_to_bytes(state, join_key(key, str(i)))) for i, state in enumerate(states)],
                "devices_here": here,
                "applied_here": here == len(states),
            }
        )
    return found


def _saved_kinds(value: object, key: str, known: Collection[str] | None = None) -> Iterator[tuple[str, str, list[Any]]]:
    """Each saved device kind (one of ``known``, if given), its key and its non-empty list of states."""
    if not isinstance(value, Mapping):
        raise ProgressStateError(key, f"expected a mapping of device kinds, got {type(value).__name__}")
    for kind, states in value.items():
        kind_key = join_key(key, str(kind))
        if known is not None and kind not in known:
            raise ProgressStateError(kind_key, f"unknown device kind; expected one of {sorted(known)}")
        if not isinstance(states, list) or not states:
            raise ProgressStateError(kind_key, "expected a non-empty list of base64 states, one per device")
        yield str(kind), kind_key, states
