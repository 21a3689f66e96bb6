"""Packaging specifications: what pyproject.toml and constraints.txt promise."""

from __future__ import annotations

from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[name.strip().lower()] = version.strip()
    return pins


def test_constraints_pin_torch_to_the_cpu_wheel_version():
    assert _pins()["torch"] == "2.13.0"


def test_constraints_pin_every_framework_exactly():
    pins = _pins()
    assert pins["pytorch-lightning"] == "2.6.6"
    assert pins["pytorch-ignite"] == "0.5.5"
    assert pins["accelerate"] == "1.15.0"
    assert pins["torchdata"] == "0.11.0"
    assert all(version for version in pins.values()), "every constraint is an exact '==' pin"


def test_every_extra_is_declared():
    project = _pyproject()["project"]
    assert set(project["optional-dependencies"]) == {"lightning", "ignite", "accelerate", "data", "display", "all", "test", "lint"}


def test_torch_range_admits_the_pinned_version_and_no_major_release_beyond():
    assert _pyproject()["project"]["dependencies"] == ["torch>=2.13,<3"]


def test_the_typed_marker_ships_with_the_one_top_level_package():
    assert _pyproject()["tool"]["setuptools"]["package-data"] == {"tracker_core": ["py.typed"]}
    assert (ROOT / "tracker_core" / "py.typed").is_file()


def test_the_distribution_is_named_tracker_core_and_maps_integrations_under_it():
    setuptools = _pyproject()["tool"]["setuptools"]
    assert _pyproject()["project"]["name"] == "tracker-core"
    assert setuptools["package-dir"]["tracker_core.integrations"] == "integrations"
    assert all(package.split(".")[0] == "tracker_core" for package in setuptools["packages"])
