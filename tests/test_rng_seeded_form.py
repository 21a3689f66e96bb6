"""A just-seeded torch state saved in its short form (``"s:<seed>"``) is read as its seed and set by ``manual_seed``.

The seed stands for the 5,056-byte state (tracker_core/data/_compact.py), so these compare it with the state itself.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tracker_core import ProgressStateError
from tracker_core.data._rng import GlobalRng

SEEDS = (0, 7, 2**63, 2**64 - 1)


def _seeded_snapshot(seed: int) -> dict[str, object]:
    """A saved snapshot whose torch part is the state of a generator just seeded with ``seed``."""
    state = torch.Generator().manual_seed(seed).get_state()
    saved = dataclasses.replace(GlobalRng.capture(), torch_state=state).to_plain()
    assert saved["torch"] == f"s:{seed}"
    return saved


@pytest.mark.parametrize("seed", SEEDS)
def test_a_seeded_torch_state_applies_as_the_state_it_stands_for(seed: int) -> None:
    snapshot = GlobalRng.from_plain(_seeded_snapshot(seed))
    torch.rand(3)
    snapshot.apply()
    assert torch.equal(torch.get_rng_state(), torch.Generator().manual_seed(seed).get_state())


@pytest.mark.parametrize("seed", SEEDS)
def test_a_seeded_torch_state_is_saved_again_as_the_same_state(seed: int) -> None:
    saved = _seeded_snapshot(seed)
    assert GlobalRng.from_plain(saved).to_plain() == saved


@pytest.mark.parametrize("text", ["s:18446744073709551616", "s:-1", "s:1x", "s:", "s:\u00b2", "s:\u0661"])
def test_a_seed_outside_64_bits_or_not_a_number_is_refused(text: str) -> None:
    saved = {**_seeded_snapshot(1), "torch": text}
    with pytest.raises(ProgressStateError) as error:
        GlobalRng.from_plain(saved)
    assert error.value.key == "torch"
