"""A blob checked without decoding it (``checked_text``) is one that decodes to exactly its bytes.

A resume that applies torch's generator alone keeps the Python and NumPy words as checked base64
text (tracker_core/data/_rng.py); these compare that check with the decoder's own verdict on
damaged texts, and show that such a state still continues every stream when applied.
"""

from __future__ import annotations

import base64
import random

import pytest
import torch

from tracker_core import ProgressStateError
from tracker_core.data._rng import GlobalRng
from tracker_core.state._codec import checked_text, text_to_bytes

SIZES = (0, 1, 2, 3, 4, 5, 2496, 2500)
DAMAGE = ("", "=", "==", "A", "AAAA", " ", "\n", "é", "*", "A=A")


def _verdict(call: object) -> object:
    try:
        return call()  # type: ignore[operator]
    except ProgressStateError as error:
        return ("error", error.key, error.problem)


def _texts(size: int) -> list[str]:
    text = base64.b64encode(bytes(range(256)) * (size // 256) + bytes(range(size % 256))).decode()
    cut = [text[:i] + damage + text[i:] for i in (0, len(text) // 2, len(text)) for damage in DAMAGE]
    return [text, *cut, text[:-1], text[1:], text.rstrip("=") + "=" * 3, text.replace("=", "A")]


@pytest.mark.parametrize("size", SIZES)
def test_checked_text_passes_a_text_exactly_when_it_decodes_to_that_many_bytes(size: int) -> None:
    for text in _texts(size):
        decoded = _verdict(lambda text=text: text_to_bytes(text, "k", size=size))
        checked = _verdict(lambda text=text: checked_text(text, "k", size))
        if isinstance(checked, str):
            assert isinstance(decoded, bytes) and len(decoded) == size, text
        else:
            assert checked == decoded, text


def test_checked_text_refuses_what_is_not_text_as_the_decoder_does() -> None:
    for value in (None, 5, b"AAAA", ["AAAA"]):
        assert _verdict(lambda value=value: checked_text(value, "k", 3)) == _verdict(
            lambda value=value: text_to_bytes(value, "k", size=3)
        )


def test_a_state_read_with_its_words_as_text_continues_every_stream_and_saves_the_same_text() -> None:
    np = pytest.importorskip("numpy")
    saved = GlobalRng.capture().to_plain()
    expected = (random.random(), float(np.random.random()), float(torch.rand(())))
    random.seed(1)
    np.random.seed(1)
    read = GlobalRng.from_plain(saved)
    assert read.to_plain() == saved
    read.apply()
    assert (random.random(), float(np.random.random()), float(torch.rand(()))) == expected


def test_damaged_words_are_refused_when_read_naming_their_key() -> None:
    pytest.importorskip("numpy")
    saved = GlobalRng.capture().to_plain()
    for part, name in (("python", "words"), ("numpy", "keys")):
        damaged = {**saved, part: {**saved[part], name: "*" + saved[part][name][1:]}}
        with pytest.raises(ProgressStateError) as caught:
            GlobalRng.from_plain(damaged)
        assert caught.value.key == f"{part}.{name}"


@pytest.mark.parametrize("size", [None, 3, 2500])
def test_a_difference_left_unapplied_is_named_as_one_before_its_size(size: int | None) -> None:
    # "x:" text reaches the decoder only when its related state is missing or damaged (tracker_core/state/_blobs.py)
    problem = "a difference from a related RNG state: damaged, or that state is missing or damaged"
    assert _verdict(lambda: text_to_bytes("x:eJwLAAAAAA==", "k", size=size)) == ("error", "k", problem)
    if size is not None:
        assert _verdict(lambda: checked_text("x:eJwLAAAAAA==", "k", size)) == ("error", "k", problem)


def test_a_python_state_whose_words_are_an_unapplied_difference_is_refused_naming_it() -> None:
    saved = GlobalRng.capture().to_plain()
    damaged = {**saved, "python": {**saved["python"], "words": "x:eJwLAAAAAA=="}}
    with pytest.raises(ProgressStateError, match="a difference from a related RNG state") as caught:
        GlobalRng.from_plain(damaged)
    assert caught.value.key == "python.words"
