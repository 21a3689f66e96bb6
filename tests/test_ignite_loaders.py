"""The Ignite adapter's test of a loader with its own state is the core's (``state_dict`` and ``load_state_dict``)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("ignite")
pytest.importorskip("torchdata")

from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core.integrations.ignite import RoundRobin
from tracker_core.integrations.ignite._loaders import any_own_state, has_own_state, has_plain_loader


class _SavesOnly(DataLoader[Any]):
    """Has a ``state_dict`` but cannot load one: the core positions it as a plain loader."""

    def state_dict(self) -> dict[str, Any]:
        return {}


def test_a_loader_with_a_state_dict_it_cannot_load_is_plain_as_for_the_core() -> None:
    data = list(range(6))
    assert has_own_state(StatefulDataLoader(data, batch_size=2))
    assert not has_own_state(_SavesOnly(data, batch_size=2))
    assert has_plain_loader(_SavesOnly(data, batch_size=2))


def test_a_round_robin_has_its_loaders_tested_one_by_one() -> None:
    data = list(range(6))
    mixed = RoundRobin(DataLoader(data, batch_size=2), StatefulDataLoader(data, batch_size=2))
    assert any_own_state(mixed) and has_plain_loader(mixed)
    assert not any_own_state(RoundRobin(DataLoader(data, batch_size=2)))
