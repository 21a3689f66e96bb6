"""Packaging specifications: what pyproject.toml and constraints.txt promise."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

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


def test_the_unified_lightning_package_is_pinned_to_the_pytorch_lightning_version():
    pins = _pins()
    assert pins["lightning"] == pins["pytorch-lightning"]
    assert "jsonargparse" in pins, "LightningCLI's parser, for the tests that drive it"


def test_every_extra_is_declared():
    project = _pyproject()["project"]
    assert set(project["optional-dependencies"]) == {
        "lightning",
        "ignite",
        "accelerate",
        "data",
        "display",
        "all",
        "test",
        "lint",
    }


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


def test_the_package_version_is_the_installed_distribution_version():
    import tracker_core

    assert tracker_core.__version__ == importlib.metadata.version("tracker-core")


def test_the_command_line_prints_the_version(capsys):
    from tracker_core import __version__
    from tracker_core.cli import main

    assert main(["--version"]) == 0
    assert capsys.readouterr().out == f"progress-tracker (tracker-core) {__version__}\n"


def test_the_license_file_is_the_apache_2_text_the_metadata_names():
    assert _pyproject()["project"]["license"] == "Apache-2.0"
    assert _pyproject()["project"]["license-files"] == ["LICENSE"]
    assert "Apache License\n                           Version 2.0, January 2004" in (ROOT / "LICENSE").read_text()
