"""The Lightning base classes of the callback and the progress bar, for both Lightning packages.

``pytorch_lightning`` and ``lightning.pytorch`` ship the same Trainer under two packages whose
``Callback`` and ``ProgressBar`` are different classes, and a Trainer checks callbacks against
its own package's classes (``isinstance`` for progress bars, ``issubclass`` in ``LightningCLI``).
So the adapter's classes subclass the base of every installed package: one class works with
either Trainer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

PACKAGES = ("pytorch_lightning", "lightning.pytorch")


def installed() -> list[str]:
    """The installed Lightning packages, ``pytorch_lightning`` first."""
    found = []
    for package in PACKAGES:
        try:
            importlib.import_module(package)
        except ImportError:
            continue
        found.append(package)
    return found


def _combined(name: str, attribute: str) -> type:
    """A class named ``name`` deriving from ``<package>.<attribute>`` of every installed package."""
    bases = []
    for package in installed():
        module_name, _, class_name = f"{package}.{attribute}".rpartition(".")
        bases.append(getattr(importlib.import_module(module_name), class_name))
    return type(
        name, tuple(bases), {"__module__": __name__, "__doc__": f"``{attribute}`` of {', '.join(installed())}."}
    )


if TYPE_CHECKING:
    from pytorch_lightning import Callback as CallbackBase
    from pytorch_lightning.callbacks.progress.progress_bar import ProgressBar as ProgressBarBase
else:
    CallbackBase = _combined("CallbackBase", "callbacks.callback.Callback")
    ProgressBarBase = _combined("ProgressBarBase", "callbacks.progress.progress_bar.ProgressBar")

__all__ = ["PACKAGES", "CallbackBase", "ProgressBarBase", "installed", "misconfiguration", "package_of"]


def package_of(trainer: object) -> str:
    """The Lightning package ``trainer``'s class comes from."""
    return "lightning.pytorch" if type(trainer).__module__.startswith("lightning.") else "pytorch_lightning"


def misconfiguration(trainer: object, message: str) -> Exception:
    """The ``MisconfigurationException`` of ``trainer``'s package, with ``message``."""
    module = importlib.import_module(f"{package_of(trainer)}.utilities.exceptions")
    error: Exception = module.MisconfigurationException(message)
    return error
