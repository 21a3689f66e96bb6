"""Run ``python -m MODULE ARGS`` in processes forked from one that imported the frameworks once.

A fresh interpreter spends ~3-4 s importing torch and a framework; a fork of one that already did starts at once.
The server (``python -m helpers.forked_runs MODULE...``, started by :class:`ForkServer`) imports the modules it is
given, then per request forks a child that changes to the request's folder, reads nothing, writes its stdout to
/dev/null and its stderr to a file, runs the module as ``__main__`` and ends as ``python -m`` would: an exception
or ``SystemExit`` leaves the interpreter with its traceback or code, and the interpreter finalizes.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any, NoReturn

_POLL_S = 0.01


class ForkServer:
    """A server process that imported ``modules`` (those installed); :meth:`run` forks a child of it per run."""

    def __init__(self, modules: list[str], env: dict[str, str]) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "helpers.forked_runs", *modules],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )

    def run(self, argv: list[str], cwd: Path, timeout: float) -> tuple[int, str]:
        """``python -m argv[0] argv[1:]`` in ``cwd``: its exit code (-9: killed after ``timeout`` s) and stderr."""
        stdin, stdout = self._pipes()
        stdin.write(json.dumps({"argv": argv, "cwd": str(cwd), "timeout": timeout}) + "\n")
        stdin.flush()
        reply = stdout.readline()
        if not reply:
            raise RuntimeError(f"the fork server exited with {self._process.wait()}")
        found: dict[str, Any] = json.loads(reply)
        return int(found["rc"]), str(found["stderr"])

    def close(self) -> None:
        stdin, _ = self._pipes()
        stdin.close()
        self._process.wait(timeout=60)

    def _pipes(self) -> tuple[IO[str], IO[str]]:
        assert self._process.stdin is not None and self._process.stdout is not None
        return self._process.stdin, self._process.stdout


def _serve(modules: list[str]) -> None:
    for module in modules:
        with contextlib.suppress(ImportError):  # not installed: a run imports it itself, and fails as it would
            importlib.import_module(module)
    for line in sys.stdin:
        request = json.loads(line)
        handle, stderr_path = tempfile.mkstemp(suffix=".stderr")
        os.close(handle)
        pid = os.fork()
        if pid == 0:
            _run_as_main(request["argv"], request["cwd"], stderr_path)
        rc = _wait(pid, request["timeout"])
        stderr = Path(stderr_path).read_text(errors="replace")
        os.unlink(stderr_path)
        print(json.dumps({"rc": rc, "stderr": stderr}), flush=True)


def _run_as_main(argv: list[str], cwd: str, stderr_path: str) -> NoReturn:
    """In the forked child: run ``argv[0]`` as ``__main__``; what it raises leaves this process as from ``python -m``."""
    os.chdir(cwd)
    quiet = os.open(os.devnull, os.O_RDWR)
    os.dup2(quiet, 0)
    os.dup2(quiet, 1)
    os.dup2(os.open(stderr_path, os.O_WRONLY), 2)
    sys.argv = list(argv)
    runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
    sys.exit(0)


def _wait(pid: int, timeout: float) -> int:
    """The exit code of child ``pid``, killed (-9) if it runs past ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while (ended := os.waitpid(pid, os.WNOHANG))[0] == 0:
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            ended = os.waitpid(pid, 0)
            break
        time.sleep(_POLL_S)
    return os.waitstatus_to_exitcode(ended[1])


if __name__ == "__main__":
    _serve(sys.argv[1:])
