"""A torch-only install reads a state written where NumPy was present: checked, kept, not applied."""

from __future__ import annotations

from typing import Any

import pytest

from tracker_core import ProgressStateError, Tracker
from tracker_core.data import _rng


@pytest.fixture
def entry_read_without_numpy(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """An entry written with numpy present; numpy is then hidden from the RNG module."""
    pytest.importorskip("numpy")
    entry = Tracker().state_dict()
    monkeypatch.setattr(_rng, "_np", None)
    return entry


def test_a_state_with_a_numpy_part_validates_without_numpy(entry_read_without_numpy: dict[str, Any]) -> None:
    Tracker().validate_state_dict(entry_read_without_numpy)


def test_loading_it_without_numpy_warns_that_the_numpy_part_is_not_applied(
    entry_read_without_numpy: dict[str, Any],
) -> None:
    with pytest.warns(UserWarning, match="numpy is not importable here"):
        Tracker().load_state_dict(entry_read_without_numpy)


def test_a_damaged_numpy_part_is_still_refused_without_numpy(entry_read_without_numpy: dict[str, Any]) -> None:
    entry_read_without_numpy["rng"]["numpy"]["pos"] = 10_000

    with pytest.raises(ProgressStateError, match=r"'rng\.numpy\.pos'"):
        Tracker().validate_state_dict(entry_read_without_numpy)
