"""Instruction counts of measured segments of a Python script under callgrind.

Timings swing +-30% on these machines; instruction counts do not, provided only the
measured code is counted. Whole-process counts are not steady: two identical runs of a
torch script differ by tens of millions of instructions, mostly outside the training
loop. So the script marks each segment it wants counted by running it through
:func:`segment` (``operator.call``, a C function nothing else here calls), and callgrind
collects only inside those calls and dumps a separate count after each one. Several
modes are measured interleaved in one process, like the timings.

Even so, one fit of a torch training loop counts a few hundred thousand instructions more
or less than its twin: the allocators (glibc's ``_int_malloc``/``_int_free`` and
Python's ``_PyObject_Free``) search free lists whose state depends on everything the
process allocated before, and that cost grows with the batches of a fit, so it does not
cancel between the small and the large one (Lightning benchmark: all of the 2.3M
instructions between two 220-batch fits of one mode were in those functions; a
``malloc_trim`` between fits did not help). So:

* the garbage collector runs between segments, outside the counts: with it off the heap
  grew fit after fit and each round counted ~4k instructions a batch more than the last,
  which the mode measured later in a round paid;
* the order of the modes turns with each repeat;
* each mode's figure is the least over the repeats, the fit the allocators burdened least
  (standard for instruction counts, as for timings); the spread between repeats is printed.
"""

from __future__ import annotations

import gc
import operator
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

_MARKER = "_operator_call"  # the C function behind operator.call
# The garbage collector is off: when a collection lands depends on every allocation since
# start-up, so it would fall inside one segment and not in its twin.
_RUN_WITHOUT_GC = (
    "import gc, os, runpy, sys; gc.disable(); sys.argv = sys.argv[1:]; "
    "sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0]))); "
    "runpy.run_path(sys.argv[0], run_name='__main__')"
)


def segment(label: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Run ``function(*args, **kwargs)`` as one counted segment named ``label`` (printed to stdout)."""
    print(f"segment: {label}", flush=True)
    operator.call(function, *args, **kwargs)


def segment_instructions(script: str, *args: str) -> list[tuple[str, int]]:
    """``(label, instructions)`` of each :func:`segment` that ``python script *args`` runs, in order."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        result = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--collect-atstart=no",
             f"--toggle-collect={_MARKER}", f"--dump-after={_MARKER}",
             sys.executable, "-c", _RUN_WITHOUT_GC, script, *args],
            capture_output=True, text=True, check=False,
            env={**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"},
        )  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(result.stderr[-2000:])
        labels = re.findall(r"^segment: (.*)$", result.stdout, flags=re.MULTILINE)
        counts = []
        for part in range(1, len(labels) + 1):
            text = Path(f"{out}.{part}").read_text()
            counts.append(int(re.search(r"^summary: (\d+)", text, flags=re.MULTILINE).group(1)))  # type: ignore[union-attr]
        return list(zip(labels, counts))


def run_segments(
    modes: Iterable[str], prepare: Callable[[str, int], Callable[[], object]], small: int, large: int, repeats: int
) -> None:
    """What callgrind counts: every mode at ``small`` and ``large`` batches, interleaved, after a
    warm-up round; the modes' order turns with each repeat. ``prepare(mode, batches)`` sets up
    (uncounted) and returns the call to count; the garbage collector runs before each count."""
    modes = list(modes)
    for repeat in range(repeats + 1):
        turn = repeat % len(modes)
        for mode in modes[turn:] + modes[:turn]:
            for batches in (small, large):
                call = prepare(mode, batches)
                gc.collect()
                segment(f"{mode if repeat else 'warm-up'} {batches}", call)
                del call


def counts_per_batch(script: str, small: int, large: int) -> tuple[dict[str, float], float] | None:
    """Run ``script --callgrind-segments`` under callgrind: each mode's least instructions per
    batch over the repeats (see the module's docstring), and the largest spread between repeats
    of a mode. None (said) without valgrind."""
    if shutil.which("valgrind") is None:
        print("callgrind: valgrind not installed, instruction counts skipped")
        return None
    figures = _per_batch(segment_instructions(script, "--callgrind-segments"), small, large)
    figures.pop("warm-up")
    counts = {mode: min(values) for mode, values in figures.items()}
    return counts, max(max(values) - min(values) for values in figures.values())


def main(timing: Callable[[], None], segments: Callable[[], None], report: Callable[[], None]) -> None:
    """A benchmark's command line: no argument: ``timing`` then ``report``; ``--callgrind``: ``report``
    only; ``--callgrind-segments``: ``segments`` (what ``report`` runs under callgrind)."""
    if sys.argv[1:] == ["--callgrind-segments"]:
        segments()
    elif sys.argv[1:] == ["--callgrind"]:
        report()
    else:
        timing()
        report()


def _per_batch(counts: list[tuple[str, int]], small: int, large: int) -> dict[str, list[float]]:
    """Instructions per batch of each mode, one figure per repeat: segments are labelled
    ``"<mode> <batches>"`` and come in pairs (``small`` then ``large`` batches)."""
    figures: dict[str, list[float]] = {}
    for (label_small, low), (label_large, high) in zip(counts[::2], counts[1::2]):
        mode, batches = label_small.rsplit(" ", 1)
        if int(batches) != small or label_large != f"{mode} {large}":
            raise ValueError(f"segments out of order: {label_small!r}, {label_large!r}")
        figures.setdefault(mode, []).append((high - low) / (large - small))
    return figures
