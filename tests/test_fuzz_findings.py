"""What the fuzz of real entries (tests/test_fuzz_entries.py) found escaping, each refused with a
ProgressStateError naming the key and nothing changed: a deeply nested value where a str is expected,
a NumPy ``has_gauss`` beyond a C int, a loader part refused in the Lightning and Ignite order (load,
then register the loaders).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

np = pytest.importorskip("numpy")

from tracker_core import Progress, ProgressStateError, Tracker
from tracker_core.state._readers import shown

from helpers.fuzz import DEEP, core_entry, core_loaders, global_rng, same_rng


def _put(entry: dict[str, Any], key: str, value: object) -> dict[str, Any]:
    """A deep copy of ``entry`` with ``value`` at the dotted ``key``."""
    changed = copy.deepcopy(entry)
    *parents, last = key.split(".")
    node: Any = changed
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    node[last] = value
    return changed


@pytest.mark.parametrize("value", [DEEP, [DEEP] * 5, "x" * 10**7, 2**10_000, list(range(10**5)), (DEEP,), {1: DEEP}])
def test_a_bad_value_is_shown_in_bounded_size(value: object) -> None:
    assert len(shown(value)) < 400


@pytest.mark.parametrize("key", ["run.kind", "ledger.runs.0.kind"])
def test_a_deeply_nested_value_for_a_str_is_refused_naming_the_key(key: str) -> None:
    state = _put(core_entry()["progress"], key, DEEP)
    progress = Progress()
    before, rng = progress.state_dict(), global_rng()
    with pytest.raises(ProgressStateError) as raised:
        progress.load_state_dict(state)
    assert raised.value.key == key
    assert progress.state_dict() == before
    assert same_rng(global_rng(), rng)


@pytest.mark.parametrize("has_gauss", [2**31, 2**63 - 1])
def test_a_numpy_has_gauss_beyond_a_c_int_is_refused_naming_the_key(has_gauss: int) -> None:
    key = "rng.numpy.has_gauss"
    entry = _put(core_entry(), key, has_gauss)
    tracker, loaders = Tracker(), core_loaders()
    for index, loader in enumerate(loaders):
        tracker.track_train_loader(loader, index)
    before, rng = tracker.state_dict(), global_rng()
    with pytest.raises(ProgressStateError) as raised:
        tracker.load_state_dict(entry)
    assert raised.value.key == key
    assert tracker.state_dict() == before
    assert same_rng(global_rng(), rng)


def test_the_largest_has_gauss_numpy_takes_is_loaded() -> None:
    entry = _put(core_entry(), "rng.numpy.has_gauss", 2**31 - 1)
    Tracker().load_state_dict(entry)
    assert np.random.get_state()[3] == 2**31 - 1


def test_a_loader_part_refused_after_the_load_leaves_the_tracker_as_before_it_with_that_loader_unregistered() -> None:
    entry = core_entry()
    swapped = {**entry, "train_loaders": entry["train_loaders"][::-1]}
    tracker, loaders = Tracker(), core_loaders()
    before, rng = tracker.state_dict(), global_rng()
    tracker.load_state_dict(swapped)
    with pytest.raises(ProgressStateError) as raised:
        tracker.track_train_loader(loaders[0], 0)  # given the other loader's part (a StatefulDataLoader's)
    assert raised.value.key == "train_loaders.0.kind"
    assert tracker.state_dict() == before  # no train loader in it
    assert same_rng(global_rng(), rng)


def test_a_loader_part_refused_after_another_was_armed_disarms_that_one() -> None:
    entry = _put(core_entry(), "train_loaders.1.batches_per_epoch", 5)
    tracker, loaders = Tracker(), core_loaders()
    rng = global_rng()
    tracker.load_state_dict(entry)
    tracker.track_train_loader(loaders[0], 0)  # a plain loader: its generators restored, nothing installed
    with pytest.raises(ProgressStateError) as raised:
        tracker.track_train_loader(loaders[1], 1)
    assert raised.value.key == "train_loaders.1.batches_per_epoch"
    assert same_rng(global_rng(), rng)
    alone, its_loaders = Tracker(), core_loaders()  # a StatefulDataLoader(shuffle=True) draws the global RNG
    alone.track_train_loader(its_loaders[0], 0)
    assert tracker.state_dict() == alone.state_dict()
    assert next(iter(loaders[0]))[0].tolist() == next(iter(core_loaders()[0]))[0].tolist()  # its epoch from the start
