"""Mutants of real checkpoint entries, loaded in a child process (tests/test_fuzz_entries.py).

Sources (real entries; see :func:`sources`): a Lightning ``.ckpt``, an Ignite ``Checkpoint`` file, an
Accelerate ``save_state`` folder (single process), the Ignite ``ProgressHandler`` state of a run over a
shuffling ``StatefulDataLoader`` (tagged tensors), a 2-process Accelerate folder, loaded by one process
(gathered ranks, elastic mapping), the ``Tracker.state_dict()`` of a plain loop over two train loaders
(:func:`core_entry`), and that entry's progress alone, loaded by a ``Progress``.

Mutations (:func:`mutants`): every key deleted, an unknown key added to every dict, every leaf
replaced by each of ``VALUES`` (an int of a saved RNG state also by ``RNG_INT_VALUES``), swapped
siblings (of a dict and of a list), broken ordering invariants (phases, scopes), bad schema versions,
corrupted and mis-sized base64 blobs, list lengths off by one, every torch dtype in a tagged tensor.
Run as ``python -m helpers.fuzz <spec.json> <report.json>``: for each mutant a fresh Tracker with the
source's loaders (registered before, or after, the load) loads it; the report counts the outcomes and
gives examples of every failure. A sample draws ``sample`` mutants of each source at random, plus every
mutant of the classes that once escaped (:func:`escaped_before`).
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import math
import random
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from tracker_core import Progress, ProgressStateError, Tracker

LONG_LIST = [0] * 1_000_000
DEEP: dict[str, Any] = {}
_node = DEEP
for _ in range(10_000):
    _node["d"] = {}
    _node = _node["d"]
VALUES: list[tuple[str, object]] = [
    ("None", None), ("True", True), ("-1", -1), ("2**63", 2**63), ("2**64", 2**64), ("1.5", 1.5),
    ("nan", math.nan), ("'1'", "1"), ("[]", []), ("{}", {}), ("long list", LONG_LIST), ("deep dict", DEEP),
]  # fmt: skip
RNG_INT_VALUES = [("2**31", 2**31), ("2**63-1", 2**63 - 1)]  # also for an int of a saved RNG state: past a C int
OUT_OF_RANGE = ("-1", "2**31", "2**63-1", "2**63", "2**64")
DTYPES = sorted(name for name in dir(torch) if isinstance(getattr(torch, name), torch.dtype))
_PHASES = ("ready", "started", "processed", "completed")
_SCOPES = ("epoch", "run", "lifetime")
_DELETED = object()

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Mutant:
    path: Path_  # where the entry was changed
    what: str
    entry: Any


# -- mutations ---------------------------------------------------------------------------------
def _walk(value: Any, path: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    yield path, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _walk(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _walk(item, (*path, index))


def _replaced(root: Any, path: Path_, value: object) -> Any:
    """``root`` with the value at ``path`` replaced (or deleted: ``_DELETED``); containers along the path copied."""
    if not path:
        return value
    head, rest = path[0], path[1:]
    copy: Any = dict(root) if isinstance(root, dict) else list(root)
    if rest:
        copy[head] = _replaced(root[head], rest, value)
    elif value is _DELETED:
        del copy[head]
    else:
        copy[head] = value
    return copy


def _is_base64(value: object) -> bool:
    if not isinstance(value, str) or len(value) < 8 or len(value) % 4:
        return False
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def mutants(entry: Any) -> Iterator[Mutant]:
    """Every mutation of ``entry`` listed in the module docstring, in a fixed order."""
    for path, value in _walk(entry):
        if isinstance(value, dict):
            for key in value:
                yield Mutant((*path, key), "deleted", _replaced(entry, (*path, key), _DELETED))
            yield Mutant((*path, "unknown"), "unknown key added", _replaced(entry, (*path, "unknown"), 1))
            keys = list(value)
            for first, second in itertools.pairwise(keys):
                if value[first] != value[second]:
                    swapped = {**value, first: value[second], second: value[first]}
                    yield Mutant(path, f"{first} and {second} swapped", _replaced(entry, path, swapped))
            if set(_PHASES) <= set(value) and isinstance(value["ready"], int):
                for phase in _PHASES[1:]:
                    broken = {**value, phase: value["ready"] + 1}
                    yield Mutant(path, f"{phase} above ready", _replaced(entry, path, broken))
            if set(_SCOPES) <= set(value) and isinstance(value["lifetime"], int):
                broken = {**value, "epoch": value["lifetime"] + 1}
                yield Mutant(path, "epoch scope above lifetime", _replaced(entry, path, broken))
            if "__tensor__" in value and isinstance(value["__tensor__"], dict):
                for dtype in DTYPES:
                    tagged = {"__tensor__": {**value["__tensor__"], "dtype": dtype}}
                    yield Mutant((*path, "__tensor__", "dtype"), f"dtype {dtype}", _replaced(entry, path, tagged))
        elif isinstance(value, list):
            if value:
                yield Mutant(path, "last item dropped", _replaced(entry, path, value[:-1]))
                yield Mutant(path, "last item repeated", _replaced(entry, path, [*value, value[-1]]))
            for index in range(len(value) - 1):
                if value[index] != value[index + 1]:
                    swapped = [*value[:index], value[index + 1], value[index], *value[index + 2 :]]
                    yield Mutant(path, f"items {index} and {index + 1} swapped", _replaced(entry, path, swapped))
        else:
            if path and path[-1] in ("schema_version", "version"):
                for bad in (0, 999, 2**31):
                    yield Mutant(path, f"version {bad}", _replaced(entry, path, bad))
            if _is_base64(value):
                for what, bad in (("cut", value[:-4]), ("extended", value + "AAAA"), ("not base64", "!" + value[1:])):
                    yield Mutant(path, f"base64 {what}", _replaced(entry, path, bad))
        if path:
            for name, bad in [*VALUES, *(RNG_INT_VALUES if type(value) is int and _in_rng(path) else [])]:
                yield Mutant(path, f"replaced by {name}", _replaced(entry, path, bad))


def _in_rng(path: Path_) -> bool:
    """Whether ``path`` is inside the saved global RNG state."""
    return "rng" in path


def _at(root: Any, path: Path_) -> Any:
    for part in path:
        root = root[part]
    return root


def escaped_before(entry: Any, mutant: Mutant) -> bool:
    """Whether ``mutant`` is of a class that once escaped as another error, or was refused leaving the tracker
    changed: a deeply nested value in a str field, an out-of-range int in a field of the saved global RNG state,
    the entries of two train loaders swapped."""
    if mutant.what == "items 0 and 1 swapped":
        return mutant.path[-1:] == ("train_loaders",)
    name = mutant.what.removeprefix("replaced by ")
    if name == mutant.what:
        return False
    original = _at(entry, mutant.path)
    if name == "deep dict":
        return isinstance(original, str)
    return name in OUT_OF_RANGE and _in_rng(mutant.path) and type(original) is int


# -- sources -----------------------------------------------------------------------------------
def plain_loader() -> DataLoader[Any]:
    """The train loader of tests/helpers/saved_checkpoints.py's Lightning and Ignite runs."""
    x = torch.linspace(-1, 1, 40).reshape(10, 4)
    return DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=3)


def saved_runs_loader() -> Any:
    """The train loader of tests/helpers/saved_checkpoints.py's runs: :func:`plain_loader` as a StatefulDataLoader."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    x = torch.linspace(-1, 1, 40).reshape(10, 4)
    return StatefulDataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=3)


def stateful_loader() -> Any:
    from torchdata.stateful_dataloader import StatefulDataLoader

    x = torch.linspace(-1, 1, 40).reshape(10, 4)
    return StatefulDataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=3, shuffle=True)


def core_loaders() -> list[DataLoader[Any]]:
    """The two train loaders of :func:`trained_core_tracker`: :func:`plain_loader`, and 7 samples shuffled by a
    StatefulDataLoader (its mid-epoch state keeps an epoch record, the plain loader's an empty one)."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    return [plain_loader(), StatefulDataLoader(TensorDataset(torch.arange(7.0)), batch_size=3, shuffle=True)]


def trained_core_tracker() -> tuple[Tracker, list[DataLoader[Any]]]:
    """The README's plain loop over :func:`core_loaders` (a batch of each per step), stopped after the second
    step of its first epoch: the tracker and its loaders."""
    torch.manual_seed(0)
    loaders = core_loaders()
    tracker = Tracker()
    for index, loader in enumerate(loaders):
        tracker.track_train_loader(loader, index)
    progress, train = tracker.progress, tracker.progress.train
    progress.run_ready("fit")
    progress.run_started()
    train.epoch_ready()
    train.epoch_started()
    for step, batches in enumerate(zip(*loaders, strict=False)):
        for index, batch in enumerate(batches):
            train.batch_ready()
            train.batch_started()
            train.optimizer_step()
            train.batch_processed(samples=len(batch[0]), dataloader=index)
            train.batch_completed()
        if step == 1:
            break
    return tracker, loaders


def core_entry() -> dict[str, Any]:
    """The ``state_dict()`` of :func:`trained_core_tracker`."""
    tracker, _loaders = trained_core_tracker()  # the tracker holds its loaders weakly: keep them for the save
    return tracker.state_dict()


def write_stateful_ignite_entry(path: Path) -> None:
    """A real Ignite run (ProgressHandler, StatefulDataLoader) stopped mid-epoch; its handler state to ``path``."""
    from ignite.engine import Engine, Events

    from tracker_core.integrations.ignite import ProgressHandler

    torch.manual_seed(0)
    loader = stateful_loader()
    trainer = Engine(lambda engine, batch: None)
    handler = ProgressHandler()
    handler.attach(trainer)

    @trainer.on(Events.ITERATION_COMPLETED(once=6))
    def save(engine: Engine) -> None:
        torch.save(handler.state_dict(), path)
        engine.terminate()

    trainer.run(loader, max_epochs=3)


@dataclass(frozen=True)
class Source:
    """A real entry and how to build the trackers that load it."""

    entry: Any
    # A fresh tracker and the loaders it needs; None: the entry is a progress state, loaded by a fresh Progress.
    tracker: Callable[[], tuple[Tracker, list[Any]]] | None
    orders: tuple[str, ...] = ("before",)  # the loaders registered before the load, or after it


def _saved_runs_tracker() -> tuple[Tracker, list[Any]]:
    return Tracker(), [saved_runs_loader()]


def _stateful_tracker() -> tuple[Tracker, list[Any]]:
    return Tracker(), [stateful_loader()]


def _core_tracker() -> tuple[Tracker, list[Any]]:
    return Tracker(), core_loaders()


def _accelerate_tracker(seedable: bool, samples: int, batch: int) -> Callable[[], tuple[Tracker, list[Any]]]:
    def build() -> tuple[Tracker, list[Any]]:
        from tracker_core.integrations.accelerate import AcceleratorProgress

        from helpers.accelerate_drive import Indexed, Setup, fresh_accelerator

        setup = Setup(samples=samples, batch_size=batch, accumulation=2, seedable=seedable, stateful=not seedable)
        accelerator = fresh_accelerator(setup)
        if seedable:
            loader = DataLoader(Indexed(samples), batch_size=batch, shuffle=True)
        else:  # the saved run's loader, prepared into a StatefulDataLoader as it was
            x = torch.linspace(-1, 1, 40).reshape(10, 4)
            loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=3)
        prepared = accelerator.prepare(loader)
        progress = AcceleratorProgress(accelerator)
        accelerator.register_for_checkpointing(progress)
        progress.track_train_loader(prepared)
        return progress._tracker, [prepared]  # the adapter's own wiring of the prepared loader

    return build


BOTH_ORDERS = ("before", "after")


def sources(files: dict[str, str]) -> dict[str, Source]:
    """The sources, from the checkpoint files the test session wrote (``files``: name -> path)."""
    lightning = torch.load(files["lightning"], weights_only=True)["callbacks"]["ProgressTracker"]
    ignite = torch.load(files["ignite"], weights_only=True)["progress"]["progress_tracker"]
    accelerate = torch.load(Path(files["accelerate"]) / "progress_tracker_0.pt", weights_only=True)["tracker"]
    stateful = torch.load(files["stateful"], weights_only=True)["progress_tracker"]
    core = core_entry()
    ranks = [
        torch.load(Path(files["two_ranks"]) / f"progress_tracker_{rank}.pt", weights_only=True)["tracker"]
        for rank in range(2)
    ]
    return {
        "lightning": Source(lightning, _saved_runs_tracker, BOTH_ORDERS),
        "ignite": Source(ignite, _saved_runs_tracker, BOTH_ORDERS),
        "accelerate": Source(accelerate, _accelerate_tracker(seedable=False, samples=10, batch=3)),
        "stateful": Source(stateful, _stateful_tracker, BOTH_ORDERS),
        "elastic": Source({**ranks[0], "ranks": ranks}, _accelerate_tracker(seedable=True, samples=24, batch=3)),
        "core": Source(core, _core_tracker, BOTH_ORDERS),
        "progress": Source(core["progress"], None),
    }


# -- running -----------------------------------------------------------------------------------
def global_rng() -> tuple[Any, ...]:
    """The global RNGs' states: torch's CPU generator, Python's ``random``, NumPy's."""
    return torch.get_rng_state(), random.getstate(), np.random.get_state()


def same_rng(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Whether two :func:`global_rng` snapshots are equal."""
    return (
        torch.equal(a[0], b[0])
        and a[1] == b[1]
        and all(np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y for x, y in zip(a[2], b[2]))
    )


def dotted(path: Path_) -> str:
    return ".".join(str(part) for part in path)


def names_the_key(error_key: str, path: Path_) -> bool:
    """The error names the changed key, one of its ancestors below the top level, or (for a cross-field
    check) a key sharing its parent or its first two components (e.g. ``progress.stages``), or
    ``progress.where`` (checked against every count); any key when ``ranks`` was deleted (the rest is
    then rank 0's entry, checked as one)."""
    got, changed = error_key.split(".") if error_key else [], [str(part) for part in path]
    if changed == ["ranks"]:  # without "ranks" the top level (rank 0's copy) is a whole entry of its own
        return True
    common = 0
    for a, b in zip(got, changed):
        if a != b:
            break
        common += 1
    if changed and changed[0] == "ranks" and len(changed) > 2:
        if got[:2] != changed[:2]:  # only a loader the mapping cannot use is named by its index alone
            return got[:1] == ["train_loaders"] and names_the_key(error_key, tuple(changed[2:]))
        got, changed, common = got[2:], changed[2:], common - 2
    if got[:2] == ["progress", "where"] and changed[:1] == ["progress"]:
        return True
    return common >= min(len(changed), 2) or (common >= len(changed) - 1 and common >= 1)


def run(spec: dict[str, Any]) -> dict[str, Any]:
    """Load the sampled mutants of each source; count outcomes, keep examples of each failure kind."""
    warnings.simplefilter("ignore")
    found = sources(spec["files"])
    report: dict[str, Any] = {"counts": {}, "failures": []}
    draw = random.Random(spec["seed"])
    current = Path(spec["current"])
    for name, source in found.items():
        all_mutants = list(mutants(source.entry))
        chosen = all_mutants
        if spec["sample"] is not None:
            drawn = set(draw.sample(range(len(all_mutants)), min(spec["sample"], len(all_mutants))))
            chosen = [m for i, m in enumerate(all_mutants) if i in drawn or escaped_before(source.entry, m)]
        counts = dict.fromkeys(("mutants", "refused", "accepted"), 0)
        counts["mutants"] = len(chosen)
        for order in source.orders:
            for mutant in chosen:
                current.write_text(f"{name} {order} {dotted(mutant.path)} {mutant.what}")
                outcome = _load(source, mutant, order)
                counts[outcome[0]] = counts.get(outcome[0], 0) + 1
                if outcome[0] not in ("refused", "accepted"):
                    report["failures"].append([name, order, dotted(mutant.path), mutant.what, *outcome])
        report["counts"][name] = counts
    return report


def _load(source: Source, mutant: Mutant, order: str) -> tuple[str, ...]:
    torch.manual_seed(0)  # an accepted mutant may have left odd but valid global RNGs (a nan cached gaussian)
    random.seed(0)
    np.random.seed(0)
    if source.tracker is None:
        return _load_progress(mutant)
    tracker, loaders = source.tracker()
    if order == "before":
        for index, loader in enumerate(loaders):
            tracker.track_train_loader(getattr(loader, "base_dataloader", loader), index)
    before_rng, before_state = global_rng(), tracker.state_dict()
    registered = 0  # after the load
    try:
        tracker.load_state_dict(mutant.entry)
        if order == "after":  # a loader part that does not fit its loader is refused here, the load undone
            for index, loader in enumerate(loaders):
                tracker.track_train_loader(getattr(loader, "base_dataloader", loader), index)
                registered += 1
    except ProgressStateError as error:
        # As before the load, but for the loaders registered after it by calls that were not refused.
        expected = (lambda: before_state) if not registered else (lambda: _registered_alone(source, registered))
        return _refused(error, error.key, mutant.path, before_rng, expected, tracker.state_dict)
    except Exception as error:
        return ("escaped", type(error).__name__, str(error)[:200])
    try:
        Tracker().validate_state_dict(tracker.state_dict())
        for loader in loaders:
            for _ in loader:  # the resumed epoch's first batch (none when the saved epoch was at its end)
                break
    except Exception as error:
        return ("accepted but broken", type(error).__name__, str(error)[:200])
    return ("accepted",)


def _registered_alone(source: Source, count: int) -> dict[str, Any]:
    """The ``state_dict()`` of a fresh tracker of ``source`` with its first ``count`` loaders registered."""
    assert source.tracker is not None
    rng = torch.get_rng_state()
    tracker, loaders = source.tracker()
    torch.set_rng_state(rng)  # a StatefulDataLoader(shuffle=True) draws the global RNG when built
    for index, loader in enumerate(loaders[:count]):
        tracker.track_train_loader(getattr(loader, "base_dataloader", loader), index)
    return tracker.state_dict()


def _load_progress(mutant: Mutant) -> tuple[str, ...]:
    """A progress state loaded by ``Progress.load_state_dict``; keys named as in a whole entry."""
    progress = Progress()
    before_rng, before_state = global_rng(), progress.state_dict()
    try:
        progress.load_state_dict(mutant.entry)
    except ProgressStateError as error:
        key = f"progress.{error.key}" if error.key else "progress"
        return _refused(error, key, ("progress", *mutant.path), before_rng, lambda: before_state, progress.state_dict)
    except Exception as error:
        return ("escaped", type(error).__name__, str(error)[:200])
    try:
        Progress().load_state_dict(progress.state_dict())
    except Exception as error:
        return ("accepted but broken", type(error).__name__, str(error)[:200])
    return ("accepted",)


def _refused(
    error: ProgressStateError,
    key: str,
    path: Path_,
    before_rng: tuple[Any, ...],
    expected: Callable[[], Any],
    state_now: Callable[[], Any],
) -> tuple[str, ...]:
    """The outcome of ``error`` (its key as in a whole entry: ``key``): the changed key at ``path`` named, and
    nothing changed (the global RNGs as ``before_rng``, ``state_now()`` as ``expected()``)."""
    if not same_rng(before_rng, global_rng()):
        return ("changed the global RNGs before refusing", key)
    try:
        changed = state_now() != expected()
    except Exception as error:
        return ("refused, then the state_dict() raised", key, type(error).__name__, str(error)[:200])
    if changed:
        return ("changed the state before refusing", key)
    if not names_the_key(key, path):
        return ("wrong key", key, error.problem[:200])
    return ("refused",)


if __name__ == "__main__":
    spec_path, report_path = sys.argv[1:]
    Path(report_path).write_text(json.dumps(run(json.loads(Path(spec_path).read_text()))))
