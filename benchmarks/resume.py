"""Resume time vs position in the epoch: the tracker's data position beside the native mechanisms.

For each loader kind (64,000 samples, batch 32, every sample costing a fixed CPU time to
load, 0 and 2 workers) it times, from building the resumed loader to its first batch, a
resume at 10%, 50% and 90% of an epoch: through ``LoaderPosition.load_state_dict`` (what
every adapter does) and through the loader's native mechanism:

* ``StatefulDataLoader`` (map-style, and over an iterable with its own ``state_dict``):
  torchdata's ``load_state_dict``. Lightning resumes a stateful loader by calling that same
  ``load_state_dict`` (it does not skip on its own), so this row is Lightning's figure too;
* Hugging Face ``datasets.IterableDataset`` (when ``datasets`` is installed; its own
  ``state_dict``): through a ``StatefulDataLoader`` (torchdata's ``load_state_dict``).

A plain ``DataLoader`` is not positioned inside an epoch (the tracker installs nothing on it), so it has no row.

The dataset is built before the clock starts (a fresh one for each resume); the figure is the
time to build the loader, load the saved position and take the first batch, the median of
``--repeats`` resumes (ten times as many at 0 workers: those take about a millisecond). Ours and
the native mechanism are timed in turn (which goes first alternates), so load from other jobs on
the machine hits both alike; ``ours/native`` is the median of the ratios of those pairs. A
sample's load cost is CPU time on the loading thread's clock. Targets (printed, not asserted): ours within 1.2x of the
native mechanism, and our 90% figure within 1.5x of our 10% figure.

``--instructions`` adds, for the 0-worker rows with a native mechanism, the instructions one
resume at 90% executes (no per-sample load cost: the fixed cost of each mechanism), counted by
valgrind's callgrind, which the load on the machine does not move: a child run of this script
(``--count-resumes``) resumes ``COUNTED`` times inside one call of ``operator.call``, the only
code callgrind counts (``--toggle-collect``), after its warm-up and with the objects it holds
frozen out of the garbage collector's scans (gc.freeze): imports and a full collection landing
in one run and not another moved a difference of two whole runs by 0.2 M.
Run: .venv/bin/python benchmarks/resume.py  (about 3 minutes on 2 cores; --help for options)
"""

from __future__ import annotations

import argparse
import gc
import operator
import shutil
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core.data._fast_forward import SlowResumeWarning
from tracker_core.data._position import LoaderPosition

SAMPLES = 64_000
BATCH = 32
BATCHES = SAMPLES // BATCH
POSITIONS = (0.1, 0.5, 0.9)
REPEATS = 7
SINGLE_PROCESS_REPEATS = 10  # times as many resumes for a 0-worker figure: a millisecond each, noisier
COUNTED = 100  # resumes whose instructions a child run counts
LOAD_COST_S = 20e-6  # CPU time to load one sample (decoding, tokenizing), spent while timing resumes


class _Cost:
    """The CPU time loading one sample takes, spent on this thread's CPU clock: on a busy machine it
    takes longer on the wall clock, as real decoding would (a wall-clock wait would not, and every
    ratio to it would then grow with the machine's load)."""

    seconds = 0.0  # set before the loaders (and their forked workers) are built

    @classmethod
    def spend(cls) -> None:
        end = time.thread_time() + cls.seconds
        while time.thread_time() < end:
            pass


class Samples(Dataset[int]):
    """Map-style: sample ``i`` is ``i``, each costing ``_Cost.seconds`` to load."""

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> int:
        _Cost.spend()
        return index


class OwnStateStream(IterableDataset[int]):
    """Iterable: each worker reads its share of the samples; its position is its own state."""

    def __init__(self) -> None:
        self.position = 0

    def __iter__(self) -> OwnStateStream:
        self.position = 0
        return self

    def __next__(self) -> int:
        info = get_worker_info()
        worker, workers = (0, 1) if info is None else (info.id, info.num_workers)
        index = worker + self.position * workers
        if index >= SAMPLES:
            raise StopIteration
        self.position += 1
        _Cost.spend()
        return index

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = state["position"]


def _hf_load(example: dict[str, Any]) -> dict[str, Any]:
    _Cost.spend()
    return example


class _HuggingFace:
    """Hugging Face ``datasets.IterableDataset`` over the same ids (4 shards, so 2 workers share them),
    each example costing ``_Cost.seconds`` in its ``map``; None where ``datasets`` is not installed."""

    table: Any = None

    @classmethod
    def dataset(cls) -> Any:
        if cls.table is None:
            import datasets

            datasets.disable_progress_bars()
            cls.table = datasets.Dataset.from_dict({"id": list(range(SAMPLES))})
        return cls.table.to_iterable_dataset(num_shards=4).map(_hf_load)

    @staticmethod
    def installed() -> bool:
        try:
            import datasets  # noqa: F401
        except ImportError:
            return False
        return True


@dataclass(frozen=True)
class Kind:
    name: str
    dataset: Callable[[], Any]  # a fresh dataset (built before the clock starts)
    loader: Callable[[Any, int], DataLoader[Any]]  # (dataset, workers) -> a fresh loader
    native: str  # the native mechanism's name, "" if none
    workers: tuple[int, ...] = (0, 2)

    def build(self, workers: int) -> DataLoader[Any]:
        return self.loader(self.dataset(), workers)


def _workers(count: int) -> dict[str, Any]:
    return {"num_workers": count, "multiprocessing_context": "fork"} if count else {}


def _stateful_map(dataset: Any, workers: int) -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(0)
    return StatefulDataLoader(dataset, batch_size=BATCH, shuffle=True, generator=generator, **_workers(workers))


def _stateful(dataset: Any, workers: int) -> DataLoader[Any]:
    return StatefulDataLoader(dataset, batch_size=BATCH, **_workers(workers))


KINDS = [
    Kind("StatefulDataLoader, map-style", Samples, _stateful_map, "torchdata load_state_dict"),
    Kind("StatefulDataLoader, iterable with state", OwnStateStream, _stateful, "torchdata load_state_dict"),
    Kind("StatefulDataLoader, HF IterableDataset", _HuggingFace.dataset, _stateful, "torchdata load_state_dict"),
]


@dataclass
class Saved:
    """What each mechanism needs to resume at batch ``k``."""

    k: int
    ours: dict[str, Any]
    native: dict[str, Any] | None


def _save(kind: Kind, workers: int) -> list[Saved]:
    """One pass over an epoch, one batch prefetched as frameworks do; the states at each position."""
    loader = kind.build(workers)
    position = LoaderPosition(loader)
    batches = iter(loader)
    yielded = 0
    saved = []
    for share in POSITIONS:
        k = int(share * BATCHES)
        while yielded < k:
            next(batches)
            yielded += 1
        native = loader.state_dict() if isinstance(loader, StatefulDataLoader) else None
        next(batches)  # the framework's prefetched batch
        yielded += 1
        saved.append(Saved(k, position.state_dict(batches_consumed=k), native))
    return saved


def _time_to_first_batch(kind: Kind, resume: Callable[[Any], Any]) -> float:
    """Seconds of ``resume(dataset)`` (build the loader, load the position) and its first batch."""
    dataset = kind.dataset()
    began = time.perf_counter()
    batches = resume(dataset)
    next(iter(batches))
    took = time.perf_counter() - began
    del batches
    return took


@dataclass(frozen=True)
class Figure:
    """One position's timings: ours, the native mechanism's (None without one), and their ratio."""

    ours: float
    native: float | None
    ratio: float | None


def _figure(kind: Kind, ours: Callable[[Any], Any], native: Callable[[Any], Any] | None, repeats: int) -> Figure:
    """Medians of ``repeats`` resumes of each, ours and native in turn (alternating which goes first), and the
    median of the ratios of those pairs."""
    mine: list[float] = []
    theirs: list[float] = []
    for repeat in range(repeats):
        if native is None:
            mine.append(_time_to_first_batch(kind, ours))
            continue
        if repeat % 2:
            theirs.append(_time_to_first_batch(kind, native))
            mine.append(_time_to_first_batch(kind, ours))
        else:
            mine.append(_time_to_first_batch(kind, ours))
            theirs.append(_time_to_first_batch(kind, native))
    if native is None:
        return Figure(statistics.median(mine), None, None)
    ratios = [o / n for o, n in zip(mine, theirs, strict=True)]
    return Figure(statistics.median(mine), statistics.median(theirs), statistics.median(ratios))


def _ours(kind: Kind, workers: int, state: dict[str, Any]) -> Callable[[Any], Any]:
    def resume(dataset: Any) -> Any:
        loader = kind.loader(dataset, workers)
        LoaderPosition(loader).load_state_dict(state)
        return loader

    return resume


def _native(kind: Kind, workers: int, saved: Saved) -> Callable[[Any], Any] | None:
    if kind.native == "torchdata load_state_dict":

        def resume(dataset: Any) -> Any:
            loader = kind.loader(dataset, workers)
            loader.load_state_dict(saved.native)  # type: ignore[attr-defined]
            return loader

        return resume
    return None


def _per_batch_cost(kind: Kind, batches: int = 300, rounds: int = 5) -> tuple[float, float]:
    """Microseconds per batch after an epoch's first (no load cost, 0 workers), without and with a
    position: the fastest of ``rounds``, the two measured in turn so that load on the machine hits both."""
    best = [float("inf"), float("inf")]
    for _ in range(rounds):
        for positioned in (False, True):
            loader = kind.build(0)
            if positioned:
                LoaderPosition(loader)
            batches_iter = iter(loader)
            next(batches_iter)
            began = time.perf_counter()
            for _ in range(batches):
                next(batches_iter)
            best[positioned] = min(best[positioned], (time.perf_counter() - began) / batches * 1e6)
    return best[0], best[1]


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=REPEATS, help="resumes timed per figure, the median kept")
    parser.add_argument("--load-us", type=float, default=LOAD_COST_S * 1e6, help="CPU microseconds to load a sample")
    parser.add_argument("--only", default="", help="time only the loader kinds whose name contains this text")
    parser.add_argument(
        "--instructions", action="store_true", help="also count instructions per 0-worker resume (needs valgrind)"
    )
    parser.add_argument("--count-resumes", nargs=3, metavar=("KIND", "MECHANISM", "N"), help=argparse.SUPPRESS)
    return parser.parse_args()


def _count_resumes(name: str, mechanism: str, resumes: int) -> None:
    """The child run measured by callgrind: save at 90% (0 workers, no load cost), resume ``resumes`` times."""
    kind = next(kind for kind in KINDS if kind.name == name)
    saved = _save(kind, 0)[-1]
    resume = _ours(kind, 0, saved.ours) if mechanism == "ours" else _native(kind, 0, saved)
    assert resume is not None
    datasets = [kind.dataset() for _ in range(3 + resumes)]  # built before counting, as before timing
    for dataset in datasets[:3]:  # three to warm up (imports, caches)
        next(iter(resume(dataset)))
    gc.collect()
    gc.freeze()

    def counted() -> None:
        for dataset in datasets[3:]:
            next(iter(resume(dataset)))

    operator.call(counted)  # what callgrind counts (--toggle-collect=_operator_call)


def _instructions(name: str, mechanism: str) -> int:
    """Instructions one resume executes: callgrind's count of ``COUNTED`` resumes in a child run, divided."""
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", "--collect-atstart=no"]
    command += ["--toggle-collect=_operator_call", sys.executable, __file__]
    command += ["--count-resumes", name, mechanism, str(COUNTED)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    line = next(line for line in done.stderr.splitlines() if "Collected" in line)
    return int(line.rsplit(maxsplit=1)[-1]) // COUNTED


def _print_instructions(kinds: list[Kind]) -> None:
    if shutil.which("valgrind") is None:
        print("\n(--instructions needs valgrind on the PATH)")
        return
    print("\ninstructions per resume at 90% (0 workers, no load cost; callgrind): ours / native")
    for kind in kinds:
        if 0 not in kind.workers or not kind.native:
            continue
        ours, native = _instructions(kind.name, "ours"), _instructions(kind.name, "native")
        print(f"  {kind.name:40} {ours / 1e6:6.2f} M / {native / 1e6:6.2f} M  ({ours / native:.2f}x)")


def main() -> None:
    arguments = _arguments()
    repeats, load_cost_s = arguments.repeats, arguments.load_us / 1e6
    warnings.filterwarnings("ignore", category=SlowResumeWarning)
    warnings.filterwarnings("ignore", message="'set_vital' is deprecated")
    if arguments.count_resumes:
        name, mechanism, resumes = arguments.count_resumes
        _count_resumes(name, mechanism, int(resumes))
        return
    kinds = [kind for kind in KINDS if arguments.only in kind.name]
    if not _HuggingFace.installed():
        kinds = [kind for kind in kinds if "HF" not in kind.name]
        print("(Hugging Face datasets is not installed: its rows are left out)")
    print(
        f"{SAMPLES:,} samples, batch {BATCH}, {load_cost_s * 1e6:.0f} us CPU per sample loaded; median of {repeats} resumes ({repeats * SINGLE_PROCESS_REPEATS} at 0 workers)"
    )
    print("time from building the resumed loader to its first batch (ms), at 10% / 50% / 90% of an epoch\n")
    header = f"{'loader':40} {'workers':>7}  {'ours':>22}  {'native':>22}  {'ours/native':>17}  {'90%/10%':>7}  native"
    print(header)
    print("-" * len(header))
    for kind in kinds:
        for workers in kind.workers:
            _Cost.seconds = 0.0  # saving needs no load cost
            saved = _save(kind, workers)
            _Cost.seconds = load_cost_s
            times = repeats * (1 if workers else SINGLE_PROCESS_REPEATS)
            figures = [_figure(kind, _ours(kind, workers, s.ours), _native(kind, workers, s), times) for s in saved]
            ours_text = " / ".join(f"{f.ours * 1e3:6.1f}" for f in figures)
            native_text = " / ".join("     —" if f.native is None else f"{f.native * 1e3:6.1f}" for f in figures)
            ratio = " / ".join("  — " if f.ratio is None else f"{f.ratio:4.2f}" for f in figures)
            print(
                f"{kind.name:40} {workers:>7}  {ours_text:>22}  {native_text:>22}  {ratio:>17}  "
                f"{figures[-1].ours / figures[0].ours:7.2f}  {kind.native or '—'}"
            )
    print("\ntargets: ours/native <= 1.20 (each position); 90%/10% <= 1.50.")
    if any(kind.name.endswith("without state") for kind in kinds):
        print("The last row reads the consumed batches again (no state to resume from): its cost grows with")
        print("the position, as the warning says.")
    print("\nwhile training: us per batch without / with a position (0 workers, no load cost)")
    _Cost.seconds = 0.0
    for kind in kinds:
        if kind.name.endswith("without state") or "HF" in kind.name:
            continue
        plain, positioned = _per_batch_cost(kind)
        print(f"  {kind.name:40} {plain:7.1f} / {positioned:7.1f}  ({positioned - plain:+.1f})")
    if arguments.instructions:
        _print_instructions(kinds)


if __name__ == "__main__":
    main()
