"""A StatefulDataLoader's saved state is read as ``from_plain`` reads it, its common untagged form by a shortcut.

``_untagged_copy`` (tracker_core/data/_stateful_loader.py) takes plain dicts of scalars a dict at a
time and leaves everything else to ``from_plain``: these compare the two on states of each kind.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tracker_core.data._stateful_loader import _untagged_copy
from tracker_core.state._codec import from_plain, to_plain

UNTAGGED = [
    {"_num_yielded": 3, "fetcher_state": {"dataset_iter_state": {"position": 96}, "fetcher_ended": False}},
    {"a": None, "b": 1.5, "c": "x", "d": True, "e": -(2**63), "f": 2**64 - 1, "g": {}},
]
LEFT_TO_FROM_PLAIN = [
    to_plain({"_sampler_iter_state": {"generator": torch.Generator().manual_seed(1).get_state()}}),
    to_plain({"shape": (1, 2)}),
    {"indices": [1, 2, 3]},
    {"big": 2**64},
    {1: "not a str key"},
    {"deep": {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": 1}}}}}}}}},
]


@pytest.mark.parametrize("state", UNTAGGED)
def test_an_untagged_state_is_copied_as_from_plain_gives_it(state: dict[str, Any]) -> None:
    copied = _untagged_copy(state, 1, [10_000])
    assert copied == from_plain(state)
    assert copied is not state


@pytest.mark.parametrize("state", LEFT_TO_FROM_PLAIN)
def test_a_tagged_listed_out_of_range_or_deep_state_is_left_to_from_plain(state: dict[Any, Any]) -> None:
    assert _untagged_copy(state, 1, [10_000]) is None


def test_a_state_of_more_values_than_the_budget_is_left_to_from_plain() -> None:
    assert _untagged_copy({str(i): i for i in range(11)}, 1, [10]) is None
