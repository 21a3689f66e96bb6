"""The one error a missing framework gives: which extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType


def require(module: str, extra: str) -> ModuleType:
    """Import ``module``; raise ``ImportError`` naming ``pip install "tracker-core[extra]"`` if it is missing."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ImportError(
            f'tracker_core.integrations.{extra} needs {module.split(".")[0]}: pip install "tracker-core[{extra}]"'
        ) from error


def check_attributes(framework: str, version: str, owners: dict[str, tuple[type, tuple[str, ...]]]) -> None:
    """Raise ``ImportError`` naming ``framework version`` if an attribute the adapter relies on is gone.

    ``owners`` maps a display name (e.g. ``"Engine"``) to a class and the attribute names a compat
    module touches: each must be a class attribute or be assigned in the class's ``__init__``.
    """
    missing = [
        f"{name}.{attribute}"
        for name, (owner, attributes) in owners.items()
        for attribute in attributes
        if not hasattr(owner, attribute) and attribute not in _assigned_in_init(owner)
    ]
    if missing:
        raise ImportError(
            f"tracker-core's {framework} adapter relies on {', '.join(missing)}, which {framework} {version} "
            "does not have: install a version in the range tracker-core declares"
        )


def _assigned_in_init(owner: type) -> tuple[str, ...]:
    init = getattr(owner, "__init__", None)
    code = getattr(init, "__code__", None)
    return tuple(code.co_names) if code is not None else ()
