"""The layout's rules: adapters use only the core's public API; each framework's private attributes are checked."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tracker_core.integrations._extra import check_attributes, check_version

ROOT = Path(__file__).resolve().parents[1]


def _imports_from_the_core(path: Path) -> list[tuple[str, str]]:
    """(module, name) of every ``from tracker_core... import name`` outside tracker_core.integrations."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tracker_core"):
            if not node.module.startswith("tracker_core.integrations"):
                found.extend((node.module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            found.extend((alias.name, "") for alias in node.names if alias.name.startswith("tracker_core"))
    return found


def _private(name: str) -> bool:
    """``_x`` is private; a dunder such as ``__version__`` is public."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@pytest.mark.parametrize("path", sorted((ROOT / "integrations").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_adapters_import_only_public_names_of_the_core(path: Path) -> None:
    private = [
        f"{module}.{name}" if name else module
        for module, name in _imports_from_the_core(path)
        if any(part.startswith("_") for part in module.split(".")) or _private(name)
    ]
    assert private == [], f"{path.name} imports private core names: {private}"


@pytest.mark.parametrize("framework", ["lightning", "ignite", "accelerate"])
def test_each_framework_compat_module_finds_every_attribute_it_touches(framework: str) -> None:
    pytest.importorskip({"lightning": "pytorch_lightning", "ignite": "ignite", "accelerate": "accelerate"}[framework])
    __import__(f"tracker_core.integrations.{framework}._compat")


def test_a_missing_framework_attribute_is_named_with_the_framework_version() -> None:
    class Engine:
        kept = 1

    check_attributes("frameworkx", "9.9", {"Engine": (Engine, ("kept",))})
    with pytest.raises(ImportError, match=r"Engine\.gone, which frameworkx 9\.9 does not have"):
        check_attributes("frameworkx", "9.9", {"Engine": (Engine, ("kept", "gone"))})


def test_a_framework_older_than_the_adapters_lowest_version_is_refused_naming_it() -> None:
    check_version("frameworkx", "2.6.0", (2, 6))
    check_version("frameworkx", "3.0.0rc1", (2, 6))
    check_version("frameworkx", "?", (2, 6))  # no version to compare
    with pytest.raises(
        ImportError, match=r"needs frameworkx 2\.6 or later \(its tests fail with older versions\), not 2\.5\.5"
    ):
        check_version("frameworkx", "2.5.5", (2, 6))


# Modules and attributes that look into the interpreter (frames, bytecode, the garbage collector, signal handlers).
_INTROSPECTION_MODULES = {"inspect", "dis", "gc", "signal", "traceback"}
_INTROSPECTION_ATTRIBUTES = {
    "_getframe",
    "f_back",
    "f_lasti",
    "f_locals",
    "f_globals",
    "__code__",
    "co_code",
    "co_names",
    "get_referrers",
}


def _introspection(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [(node.module or "").split(".")[0]]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value] if node.value in _INTROSPECTION_ATTRIBUTES else []  # getattr(obj, "__code__")
        else:
            continue
        found.extend(
            f"{node.lineno}: {name}" for name in names if name in _INTROSPECTION_MODULES | _INTROSPECTION_ATTRIBUTES
        )
    return found


@pytest.mark.parametrize(
    "path",
    sorted([*(ROOT / "tracker_core").rglob("*.py"), *(ROOT / "integrations").rglob("*.py")]),
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_the_library_looks_into_no_frame_bytecode_garbage_collector_or_signal_handler(path: Path) -> None:
    assert _introspection(path) == []


def test_the_introspection_finder_finds_a_frame_walk(tmp_path: Path) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(
        'import inspect\nimport sys\n\ndef caller():\n    return sys._getframe(1).f_back, getattr(caller, "__code__")\n'
    )
    assert sorted(_introspection(planted)) == ["1: inspect", "5: __code__", "5: _getframe", "5: f_back"]
