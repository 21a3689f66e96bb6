"""Every private attribute of Accelerate the adapter touches (docs/design.md)."""

from __future__ import annotations

from typing import Any

import torch
from accelerate.accelerator import Accelerator


def prepared_optimizers(accelerator: Accelerator) -> list[Any]:
    """The optimizers ``accelerator.prepare`` returned so far, in order (Accelerate keeps them privately)."""
    return list(accelerator._optimizers)


def prepared_models(accelerator: Accelerator) -> list[torch.nn.Module]:
    """The models ``accelerator.prepare`` returned so far, in order (Accelerate keeps them privately)."""
    return list(accelerator._models)


def prepared_schedulers(accelerator: Accelerator) -> list[Any]:
    """The schedulers ``accelerator.prepare`` returned so far (each an ``AcceleratedScheduler``), in order."""
    return list(accelerator._schedulers)


def registered_objects(accelerator: Accelerator) -> list[Any]:
    """The objects ``accelerator.register_for_checkpointing`` took so far, in order (``save_state`` saves them last)."""
    return list(accelerator._custom_objects)


# The private attributes instances get in __init__ (all of Accelerate's): checked by tests/test_compat_instances.py.
INSTANCE_ATTRIBUTES: dict[type, tuple[str, ...]] = {
    Accelerator: ("_models", "_optimizers", "_schedulers", "_custom_objects"),
}
