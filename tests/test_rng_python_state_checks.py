"""A saved Python ``random`` state is accepted exactly when ``random.setstate`` would take it.

The reader checks the packed words without unpacking them (tracker_core/data/_rng.py), so these
compare its verdict with Python's own on states that differ in format and position.
"""

from __future__ import annotations

import base64
import random
import struct

import pytest

from tracker_core import ProgressStateError
from tracker_core.data._rng import GlobalRng

WORDS = 625  # 624 words + position


def _state_with(fmt: int, position: int) -> dict[str, object]:
    state = GlobalRng.capture().to_plain()
    words = list(struct.unpack(f"<{WORDS}I", base64.b64decode(state["python"]["words"])))
    words[-1] = position
    state["python"] = {
        **state["python"],
        "format": fmt,
        "words": base64.b64encode(struct.pack(f"<{WORDS}I", *words)).decode(),
    }
    return state


def _python_takes(fmt: int, position: int) -> bool:
    words = (*random.getstate()[1][:-1], position)
    try:
        random.Random().setstate((fmt, words, None))
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(
    ("fmt", "position"), [(3, 0), (3, 624), (3, 625), (3, 2**32 - 1), (2, 624), (2, 625), (1, 0), (4, 0)]
)
def test_a_python_state_is_refused_exactly_when_random_setstate_refuses_it(fmt: int, position: int) -> None:
    state = _state_with(fmt, position)
    if _python_takes(fmt, position):
        GlobalRng.from_plain(state).apply()
        assert random.getstate()[1][-1] == position
    else:
        with pytest.raises(ProgressStateError) as caught:
            GlobalRng.from_plain(state).apply()
        assert caught.value.key == "python"


def test_a_restored_python_state_continues_the_stream() -> None:
    random.seed(7)
    random.random()
    state = GlobalRng.capture().to_plain()
    expected = [random.random() for _ in range(5)]
    random.seed(8)
    GlobalRng.from_plain(state).apply()
    assert [random.random() for _ in range(5)] == expected
