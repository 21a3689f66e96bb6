"""The version ranges pyproject.toml declares are the ones ``make test-versions`` runs the tests at, and the one
the Lightning adapter checks at import: a floor changed in one place fails here until the others follow."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_SPEC = re.compile(r"([A-Za-z0-9_-]+)>=([0-9.]+)(?:,<([0-9.]+))?$")


def _declared(extra: str = "all") -> dict[str, tuple[str, str | None]]:
    """Each requirement of ``extra``: its floor and its ceiling (None if open)."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        requirements = tomllib.load(f)["project"]["optional-dependencies"][extra]
    ranges = {}
    for requirement in requirements:
        match = _SPEC.match(requirement)
        if match is not None:
            ranges[match[1]] = (match[2], match[3])
    return ranges


def _swept() -> dict[str, tuple[str, str]]:
    spec = importlib.util.spec_from_file_location("test_versions", ROOT / ".ci" / "test_versions.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ranges: dict[str, tuple[str, str]] = module.RANGES
    return ranges


def _release(version: str, parts: int = 3) -> tuple[int, ...]:
    numbers = tuple(int(part) for part in version.split("."))
    return numbers + (0,) * (parts - len(numbers))


def test_every_declared_framework_range_is_swept_from_its_floor() -> None:
    declared, swept = _declared(), _swept()
    assert set(swept) == set(declared)
    for package, (floor, _ceiling) in declared.items():
        assert _release(swept[package][0]) == _release(floor), package


def test_the_highest_swept_version_of_each_range_lies_inside_it() -> None:
    declared, swept = _declared(), _swept()
    for package, (_floor, ceiling) in declared.items():
        if ceiling is not None:
            assert _release(swept[package][1]) < _release(ceiling), package


def test_the_lightning_adapter_refuses_exactly_the_versions_below_the_declared_floor() -> None:
    pytest.importorskip("pytorch_lightning")
    from tracker_core.integrations.lightning import _compat

    floor = _release(_declared()["pytorch-lightning"][0], parts=2)
    assert floor == _compat._LOWEST_VERSION
    assert _release(_declared("test")["lightning"][0], parts=2) == floor  # the unified package, which no extra holds
