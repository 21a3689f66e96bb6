"""The base classes of the callback and the progress bar, deriving from those of every installed Lightning package
(``pytorch_lightning`` and ``lightning.pytorch`` ship different classes; docs/lightning.md, "Both packages")."""

from __future__ import annotations

import contextlib
import importlib
from typing import TYPE_CHECKING


def installed() -> list[str]:
    """The installed Lightning packages, ``pytorch_lightning`` first."""
    found = []
    for package in ("pytorch_lightning", "lightning.pytorch"):
        with contextlib.suppress(ImportError):
            importlib.import_module(package)
            found.append(package)
    return found


def _combined(name: str, attribute: str) -> type:
    """A class named ``name`` deriving from ``<package>.<attribute>`` of every installed package."""
    packages = installed()
    module_name, _, class_name = attribute.rpartition(".")
    bases = tuple(getattr(importlib.import_module(f"{package}.{module_name}"), class_name) for package in packages)
    return type(name, bases, {"__module__": __name__, "__doc__": f"``{attribute}`` of {', '.join(packages)}."})


if TYPE_CHECKING:
    from pytorch_lightning import Callback as CallbackBase
    from pytorch_lightning.callbacks.progress.progress_bar import ProgressBar as ProgressBarBase
else:
    CallbackBase = _combined("CallbackBase", "callbacks.callback.Callback")
    ProgressBarBase = _combined("ProgressBarBase", "callbacks.progress.progress_bar.ProgressBar")

__all__ = ["CallbackBase", "ProgressBarBase", "installed", "package_of"]


def package_of(trainer: object) -> str:
    """The Lightning package ``trainer``'s class comes from."""
    return "lightning.pytorch" if type(trainer).__module__.startswith("lightning.") else "pytorch_lightning"
