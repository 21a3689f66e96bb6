"""Accelerator generators without an accelerator: CPU ``torch.Generator``s standing in for each device's.

Substitute one for a device kind with ``monkeypatch.setitem(_device_rng.DEVICE_KINDS, "cuda", CpuStandIn(2))``:
the code paths are the CUDA ones. ``available=False`` stands for a machine without that kind of device.
"""

from __future__ import annotations

import torch


class CpuStandIn:
    """``count`` devices whose generators are CPU torch.Generators."""

    def __init__(self, count: int, available: bool = True) -> None:
        self.generators = [torch.Generator().manual_seed(100 + i) for i in range(count)]
        self.available = available

    def is_available(self) -> bool:
        return self.available

    def is_initialized(self) -> bool:
        return self.available

    def device_count(self) -> int:
        return len(self.generators)

    def get_rng_state(self, device: int) -> torch.Tensor:
        return self.generators[device].get_state()

    def set_rng_state(self, state: torch.Tensor, device: int) -> None:
        self.generators[device].set_state(state)

    def draws(self) -> list[float]:
        return [torch.rand(1, generator=g).item() for g in self.generators]
