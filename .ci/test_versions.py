"""Run each optional dependency's tests against the lowest and the highest version its declared range admits.

``make test` runs with the versions pinned in constraints.txt; this checks the ends of the ranges
pyproject.toml declares. For every (package, version) not pinned already: a venv under
build/versions/ whose ``.pth`` reaches this .venv's site-packages (torch, pytest and the rest), then
``pip install`` of the tracker-core wheel (no dependencies) and of the package at that version (pip
adds only what the .venv lacks; torch stays pinned), then the package's tests from tests/, with
``PYTHONSAFEPATH`` so the source tree cannot shadow the installed wheel.

torch itself is not swept: its range starts at the pinned 2.13.0, and a newer torch from the index
is a multi-GB CUDA build. Usage: ``.venv/bin/python .ci/test_versions.py [package ...]``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "build" / "versions"

# The ends of each declared range, as the package index offered them on 2026-12-03 (pytorch-lightning on
# 2026-12-06; `pip index versions <package>`). Update them when a range or the index changes.
RANGES: dict[str, tuple[str, str]] = {
    "pytorch-lightning": ("2.6.0", "2.6.6"),  # >=2.6,<3
    "pytorch-ignite": ("0.5.5", "0.5.5"),  # >=0.5.5,<0.6
    "accelerate": ("1.15.0", "1.16.0"),  # >=1.15,<2
    "torchdata": ("0.11.0", "0.11.0"),  # >=0.11,<0.12
    "rich": ("13.0.0", "15.0.0"),  # >=13
}
# The compat checks (test_architecture imports every _compat module) and each package's fast tests.
TESTS: dict[str, list[str]] = {
    # Every Lightning test, and the conformance tests that run the three frameworks side by side.
    "pytorch-lightning": [
        "tests/test_architecture.py",
        *sorted(str(path.relative_to(ROOT)) for path in ROOT.glob("tests/test_lightning_*.py")),
        "tests/test_conformance.py",
        "tests/test_display_frameworks.py",
    ],
    "pytorch-ignite": ["tests/test_architecture.py", "tests/test_ignite_counting.py"],
    # Every Accelerate test that runs from the installed wheel (the two-process and elastic ones start helper
    # scripts that import the source tree). At 1.16.0 on 2026-12-04 all passed but the 3 cases of
    # test_accelerate_resume.py's iterable-dataset resume (progress microseconds.fast_forward), which fail alike at 1.15.0.
    "accelerate": [
        "tests/test_architecture.py",
        "tests/test_accelerate_bad_state.py",
        "tests/test_accelerate_counting.py",
        "tests/test_accelerate_first_law.py",
        "tests/test_accelerate_loaders.py",
        "tests/test_accelerate_matrix.py",
        "tests/test_accelerate_resume.py",
        "tests/test_accelerate_scheduler_steps.py",
    ],
    "torchdata": ["tests/test_data_position.py"],
    "rich": ["tests/test_display_core.py", "tests/test_display_frameworks.py", "tests/test_display_tokens.py"],
}


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        name, _, version = line.split("#", 1)[0].strip().partition("==")
        if version:
            pins[name.strip().lower()] = version.strip()
    return pins


def _run(command: list[str], quiet: bool = False) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL if quiet else None)


def _wheel() -> Path:
    dist = WORK / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    # Without --wheel, build makes the sdist and the wheel from it (no stale modules from build/lib).
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)], quiet=True)
    (wheel,) = dist.glob("*.whl")
    return wheel


def _check(package: str, version: str, wheel: Path) -> bool:
    venv = WORK / f"{package}-{version}"
    shutil.rmtree(venv, ignore_errors=True)
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "dev_venv.pth").write_text(sysconfig.get_path("purelib") + "\n")
    torch_pin = venv / "torch-pin.txt"
    torch_pin.write_text(f"torch=={_pins()['torch']}\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet"]
    _run([*pip, "--no-deps", str(wheel)])
    _run([*pip, "-c", str(torch_pin), f"{package}=={version}"])
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"} | {"PYTHONSAFEPATH": "1"}
    command = [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS[package]]
    return subprocess.run(command, cwd=ROOT, env=env).returncode == 0


def main(packages: list[str]) -> int:
    pins, wheel, results = _pins(), _wheel(), []
    for package in packages or list(RANGES):
        for version in sorted(set(RANGES[package])):
            if pins.get(package) == version:
                results.append((package, version, "pinned: tested by make test"))
                continue
            results.append((package, version, "passed" if _check(package, version, wheel) else "FAILED"))
    for package, version, outcome in results:
        print(f"{package:20} {version:10} {outcome}")
    return 1 if any(outcome == "FAILED" for *_, outcome in results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
