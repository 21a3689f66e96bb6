"""The built distributions: the wheel installs into a fresh environment; the sdist carries its tests.

Both are built with ``python -m build --no-isolation`` from a clean copy of the working tree (tracked and
untracked files git does not ignore): a build in the tree itself reuses ``build/lib``, where a module that
was moved or deleted lingers and would be packed. The fresh environment is a venv of this interpreter
whose ``.pth`` adds this venv's site-packages (torch and the frameworks) after its own, so only the
wheel can provide ``tracker_core``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(command: list[str], cwd: Path) -> str:
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{command}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result.stdout


def _source_files() -> list[str]:
    listed = _run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], ROOT).splitlines()
    return [name for name in listed if (ROOT / name).is_file()]


@dataclass(frozen=True)
class Source:
    """A clean copy of the working tree and the files copied (other sessions may add files meanwhile)."""

    path: Path
    files: tuple[str, ...]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Source:
    copy = tmp_path_factory.mktemp("source")
    files = tuple(_source_files())
    for name in files:
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_bytes((ROOT / name).read_bytes())
    return Source(copy, files)


def _build(source: Source, kind: str) -> Path:
    dist = source.path.parent / f"{source.path.name}-{kind}"
    _run([sys.executable, "-m", "build", f"--{kind}", "--no-isolation", "--outdir", str(dist), "."], source.path)
    (built,) = dist.iterdir()
    return built


@pytest.fixture(scope="module")
def wheel(source: Source) -> Path:
    return _build(source, "wheel")


@pytest.fixture(scope="module")
def fresh_python(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv with the wheel installed (no dependencies); torch and the frameworks come from this venv."""
    venv = tmp_path_factory.mktemp("venv")
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], venv)
    python = venv / "bin" / "python"
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], venv).strip())
    (site / "frameworks_from_the_dev_venv.pth").write_text(sysconfig.get_path("purelib") + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)], venv)
    return python


def _wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return archive.namelist()


def test_the_wheel_installs_only_tracker_core_at_the_top_level(wheel: Path) -> None:
    tops = {name.split("/")[0] for name in _wheel_names(wheel)}
    assert tops == {"tracker_core", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}


def test_the_wheel_holds_every_module_of_the_core_and_the_integrations_and_nothing_else(
    source: Source, wheel: Path
) -> None:
    expected = {
        name.replace("integrations/", "tracker_core/integrations/", 1)
        for name in source.files
        if name.endswith(".py") and name.startswith(("tracker_core/", "integrations/"))
    }
    packed = {name for name in _wheel_names(wheel) if name.endswith(".py")}
    assert packed == expected


def test_the_wheel_carries_the_typed_marker_the_license_and_the_three_adapters(wheel: Path) -> None:
    names = _wheel_names(wheel)
    assert "tracker_core/py.typed" in names
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    for framework in ("lightning", "ignite", "accelerate"):
        assert f"tracker_core/integrations/{framework}/__init__.py" in names


def test_the_installed_wheel_imports_the_core_and_the_lightning_callback(fresh_python: Path) -> None:
    out = _run(
        [
            str(fresh_python),
            "-c",
            "import tracker_core\n"
            "from tracker_core.integrations.lightning import ProgressTracker\n"
            "print(tracker_core.__file__)\n"
            "print(ProgressTracker.__module__)\n",
        ],
        fresh_python.parent,
    ).splitlines()
    assert Path(out[0]).is_relative_to(fresh_python.parents[1])
    assert out[1] == "tracker_core.integrations.lightning._callback"


def test_the_installed_command_prints_the_version(fresh_python: Path) -> None:
    from tracker_core import __version__

    out = _run([str(fresh_python.parent / "progress-tracker"), "--version"], fresh_python.parent)
    assert out == f"progress-tracker (tracker-core) {__version__}\n"


def test_the_sdist_carries_every_file_the_tests_examples_and_docs_need(source: Source) -> None:
    sdist = _build(source, "sdist")
    with tarfile.open(sdist) as archive:
        packed = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    needed = {
        name
        for name in source.files
        if name.startswith(("tracker_core/", "integrations/", "tests/", "examples/", "docs/", "benchmarks/"))
        or name in ("LICENSE", "README.md", "Makefile", "constraints.txt", "pyproject.toml", "MANIFEST.in")
    }
    assert needed - packed == set()
