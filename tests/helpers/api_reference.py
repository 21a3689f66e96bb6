"""docs/api/: one reference page per public module, rendered from its ``__all__`` and docstrings.

A page lists each public name with its signature and docstring; a class also lists the public
methods and properties tracker-core defines on it (members inherited from a framework's base
class are left out). Private names never appear. ``make api-docs`` writes the pages;
tests/test_api_reference.py checks the committed pages are what this renders.
"""

from __future__ import annotations

import enum
import importlib
import inspect
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "docs" / "api"
MODULES = (
    "tracker_core",
    "tracker_core.vocabulary",
    "tracker_core.adapter",
    "tracker_core.checkpoints",
    "tracker_core.cli",
    "tracker_core.integrations.lightning",
    "tracker_core.integrations.ignite",
    "tracker_core.integrations.accelerate",
)


def page_path(module: str) -> Path:
    return FOLDER / f"{module}.md"


def public_names(module: ModuleType) -> list[str]:
    """``__all__``, or the public names the module itself defines."""
    names = getattr(module, "__all__", None)
    if names is None:
        names = [
            n
            for n, v in vars(module).items()
            if not n.startswith("_") and getattr(v, "__module__", None) == module.__name__
        ]
    return list(names)


def _doc(obj: Any) -> str:
    return inspect.cleandoc(obj.__doc__) if obj.__doc__ else "(no docstring)"


def _signature(obj: Any) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"


def _own_members(cls: type) -> list[tuple[str, Any]]:
    """Public methods and properties tracker-core's classes in ``cls``'s MRO define, less the framework
    hooks they override (a Lightning callback's ``on_*``: the framework documents those)."""
    ours = [k for k in cls.__mro__ if k.__module__.startswith("tracker_core")]
    frameworks = {name for k in cls.__mro__ if k not in ours for name in vars(k)}
    members: dict[str, Any] = {}
    for klass in reversed(ours):
        for name, value in vars(klass).items():
            if name.startswith("_") or name in frameworks:
                continue
            if callable(value) or isinstance(value, property | classmethod | staticmethod):
                members[name] = value
    return sorted(members.items())


def _class(name: str, cls: type) -> list[str]:
    if issubclass(cls, enum.Enum):
        values = ", ".join(f"`{m.name}` = `{m.value!r}`" for m in cls)
        return [f"## class `{name}`", "", _doc(cls), "", f"Members: {values}", ""]
    lines = [f"## class `{name}{_signature(cls)}`", "", _doc(cls), ""]
    for member, value in _own_members(cls):
        if isinstance(value, property):
            lines += [f"### `{name}.{member}` (property)", "", _doc(value), ""]
        else:
            function = value.__func__ if isinstance(value, classmethod | staticmethod) else value
            lines += [f"### `{name}.{member}{_signature(function)}`", "", _doc(function), ""]
    return lines


def render(module_name: str) -> str:
    """The reference page of ``module_name``."""
    module = importlib.import_module(module_name)
    lines = [f"# `{module_name}`", "", _doc(module), ""]
    for name in public_names(module):
        value = getattr(module, name)
        if inspect.isclass(value):
            lines += _class(name, value)
        elif inspect.ismodule(value):
            lines += [f"## module `{name}`", "", _doc(value), ""]
        elif callable(value):
            lines += [f"## `{name}{_signature(value)}`", "", _doc(value), ""]
        else:
            lines += [f"## `{name}` = `{value!r}`", ""]
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":
    FOLDER.mkdir(exist_ok=True)
    for module in MODULES:
        page_path(module).write_text(render(module), encoding="utf-8")
        print(f"wrote {page_path(module).relative_to(ROOT)}")
