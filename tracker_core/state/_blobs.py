"""Short text for RNG-state blobs (docs/schema.md, ``train_loaders``); plain base64 stays valid everywhere. A torch
CPU state (5,056 bytes, half zero) shuffled by 8 and compressed is about 2.6 KB (``"z:"``); two snapshots a few draws
apart differ in a few bytes (``"x:"``, the compressed XOR with the related blob ``data/_compact.py`` picks)."""

from __future__ import annotations

import zlib

import torch

from tracker_core._errors import ProgressStateError
from tracker_core.state._codec import MAX_BLOB_BYTES, bytes_to_text, tensor_to_bytes, text_to_bytes

_COMPRESSED = "z:"
_DELTA = "x:"
_SEEDED = "s:"
_SHUFFLE = 8  # bytes per word: a torch state's 64-bit slots
_SEED_BYTES = 8  # a torch CPU state begins with its initial seed (uint64)


def short_text(data: bytes, base: bytes | None = None) -> str:
    """The shortest of plain, ``"z:"`` and (with a ``base`` of the same length) ``"x:"`` text for ``data``."""
    seed = int.from_bytes(data[:_SEED_BYTES], "little")
    if len(data) > _SEED_BYTES and seeded_state(seed) == data:  # a generator just seeded with ``seed``
        return f"{_SEEDED}{seed}"
    texts = [bytes_to_text(data), _COMPRESSED + bytes_to_text(zlib.compress(_shuffle(data), 9))]
    if base is not None and len(base) == len(data):
        texts.append(_DELTA + bytes_to_text(zlib.compress(_xor(data, base), 9)))
    return min(texts, key=len)


def _xor(data: bytes, base: bytes) -> bytes:
    """``data`` XOR ``base`` (same length), bytewise, as one big-integer operation."""
    return (int.from_bytes(data, "little") ^ int.from_bytes(base, "little")).to_bytes(len(data), "little")


def blob_bytes(value: object, key: str, base: bytes | None = None) -> bytes:
    """The bytes of any text form; ``base``: the blob an ``"x:"`` text is relative to (None: none is known)."""
    if isinstance(value, str) and value.startswith(_COMPRESSED):
        return _unshuffle(_inflate(value[len(_COMPRESSED) :], key))
    if isinstance(value, str) and value.startswith(_SEEDED):
        seed = seed_in(value)
        if seed is None:
            raise ProgressStateError(key, "expected the seed of a torch generator (an integer below 2**64)")
        return seeded_state(seed)
    if isinstance(value, str) and value.startswith(_DELTA):
        if base is None:
            raise ProgressStateError(key, "a difference from a related RNG state that is missing here")
        delta = _inflate(value[len(_DELTA) :], key)
        if len(delta) != len(base):
            raise ProgressStateError(key, f"a difference of {len(delta)} bytes from a state of {len(base)}")
        return _xor(delta, base)
    return text_to_bytes(value, key)


def short_bytes(value: str, key: str, base: bytes | None = None) -> bytes | None:
    """The bytes of a short text form; None for plain base64 and for a difference that cannot be applied
    (damaged, or its ``base`` missing or damaged: the base's own reader names that), left for the reader."""
    if not value.startswith((_COMPRESSED, _DELTA, _SEEDED)):
        return None
    try:
        return blob_bytes(value, key, base)
    except ProgressStateError:
        if value.startswith(_DELTA):
            return None
        raise


def seed_in(text: object) -> int | None:
    """The seed of an ``"s:<seed>"`` text (decimal digits, below 2**64), or None for any other value."""
    if not isinstance(text, str) or not text.startswith(_SEEDED):
        return None
    digits = text[len(_SEEDED) :]
    if not digits.isascii() or not digits.isdigit() or len(digits) > 20 or int(digits) >= 2**64:
        return None
    return int(digits)


def seeded_state(seed: int) -> bytes:
    """The state of a torch CPU generator just seeded with ``seed``."""
    return tensor_to_bytes(torch.Generator().manual_seed(seed).get_state())


def _inflate(text: str, key: str) -> bytes:
    packed = text_to_bytes(text, key)
    inflater = zlib.decompressobj()
    try:
        data = inflater.decompress(packed, MAX_BLOB_BYTES)
    except zlib.error:
        raise ProgressStateError(key, "not valid compressed data") from None
    if inflater.unconsumed_tail or not inflater.eof or inflater.unused_data:
        raise ProgressStateError(key, f"compressed data that is damaged or holds more than {MAX_BLOB_BYTES} bytes")
    return data


def _shuffle(data: bytes) -> bytes:
    """Byte ``i`` of every 8-byte word together, then the tail: a state's zero halves become long runs."""
    whole = len(data) - len(data) % _SHUFFLE
    return b"".join(data[i:whole:_SHUFFLE] for i in range(_SHUFFLE)) + data[whole:]


def _unshuffle(data: bytes) -> bytes:
    whole = len(data) - len(data) % _SHUFFLE
    words = whole // _SHUFFLE
    out = bytearray(len(data))
    for i in range(_SHUFFLE):
        out[i:whole:_SHUFFLE] = data[i * words : (i + 1) * words]
    out[whole:] = data[whole:]
    return bytes(out)
