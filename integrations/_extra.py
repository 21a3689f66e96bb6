"""The one error a missing framework gives: which extra to install."""

from __future__ import annotations

import importlib
import re
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
    """Raise ``ImportError`` naming ``framework version`` if a class attribute the adapter relies on is gone. ``owners``
    maps a display name (e.g. ``"_FitLoop"``) to a class and the class attributes a compat module touches; those an
    instance gets in ``__init__`` are in the module's ``INSTANCE_ATTRIBUTES`` (tests/test_compat_instances.py)."""
    missing = [
        f"{name}.{attribute}"
        for name, (owner, attributes) in owners.items()
        for attribute in attributes
        if not hasattr(owner, attribute)
    ]
    if missing:
        raise ImportError(
            f"tracker-core's {framework} adapter relies on {', '.join(missing)}, which {framework} {version} "
            "does not have: install a version in the range tracker-core declares"
        )


def check_version(framework: str, version: str, lowest: tuple[int, int]) -> None:
    """Raise ``ImportError`` naming ``framework version`` if it is below ``lowest`` (major, minor), where the adapter's
    tests fail; a version that does not start with ``major.minor`` is not checked."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is not None and (int(found[1]), int(found[2])) < lowest:
        raise ImportError(
            f"tracker-core's {framework} adapter needs {framework} {lowest[0]}.{lowest[1]} or later (its tests fail "
            f"with older versions), not {version}: install a version in the range tracker-core declares"
        )
