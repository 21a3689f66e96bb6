"""Global RNG snapshots: torch CPU, Python ``random``, NumPy (when importable) and initialised accelerators;
saved as version 2, the one form read (docs/schema.md, ``rng``)."""

from __future__ import annotations

import binascii
import random
import struct
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from tracker_core._errors import ProgressStateError
from tracker_core.data._compact import RNG_VERSION, Decoded, Seeded, blob_bytes_of, compact_rng, expand_rng
from tracker_core.data._device_rng import (
    DeviceStates,
    apply_devices,
    capture_devices,
    devices_from_plain,
    devices_to_plain,
)
from tracker_core.state._blobs import seeded_state
from tracker_core.state._codec import checked_text, tensor_to_bytes
from tracker_core.state._readers import (
    INT32_MAX,
    join_key,
    read_float_or_none,
    read_int,
    read_mapping,
    read_str,
    read_version,
    shown,
)

_np: Any
try:
    import numpy as _np
except ImportError:  # pragma: no cover - numpy is optional
    _np = None

_MT_WORDS = 625  # Python's Mersenne Twister state: 624 words + position
_NP_WORDS = 624
_NP_ALGORITHM = "MT19937"  # the only one NumPy's global RandomState has
_SNAPSHOT_KEYS = ("version", "torch", "python", "numpy")
_PYTHON_KEYS = ("format", "words", "gauss_next")
_NUMPY_KEYS = ("algorithm", "keys", "pos", "has_gauss", "cached_gaussian")
_PYTHON_FORMATS = (2, 3)  # the versions Random.setstate reads (2: Python 2's, its words taken mod 2**32)


@dataclass(frozen=True)
class GlobalRng:
    """The global generators' states in memory (``capture`` / ``apply``): torch CPU, ``random``, NumPy and initialised
    accelerators. Read from plain data, ``torch_state`` may be a :class:`Seeded` seed (applied with ``manual_seed``),
    and Python's and NumPy's words stay packed (bytes, or checked base64 text) until applied."""

    torch_state: torch.Tensor | Seeded
    python_state: tuple[Any, ...]
    numpy_state: tuple[Any, ...] | None
    devices: DeviceStates

    @classmethod
    def capture(cls) -> GlobalRng:
        """Snapshot the live global generators (a few tens of microseconds)."""
        numpy_state = _np.random.get_state() if _np is not None else None
        return cls(torch.get_rng_state(), random.getstate(), numpy_state, capture_devices())

    def apply(self) -> None:
        """Set the live global generators to this snapshot."""
        if isinstance(self.torch_state, Seeded):
            torch.default_generator.manual_seed(self.torch_state)
        else:
            torch.set_rng_state(self.torch_state)
        random.setstate(_unpacked(self.python_state))
        if self.numpy_state is not None and _np is not None:
            _np.random.set_state(_numpy_unpacked(self.numpy_state))
        elif self.numpy_state is not None:
            warnings.warn(
                "the state holds a NumPy RNG state but numpy is not importable here: it is not applied",
                UserWarning,
                stacklevel=2,
            )
        apply_devices(self.devices)

    def to_plain(self) -> dict[str, Any]:
        """``{"version": 2, "torch", "python", "numpy"}`` (``numpy`` may be None), plus ``"devices"``
        (``{kind: [state per device]}``) when an accelerator was initialised; each blob a short text."""
        return compact_rng(expanded(self))

    @classmethod
    def from_plain(cls, state: object, key: str = "") -> GlobalRng:
        """Validate fully (each part is tried on a scratch generator), changing nothing; only version 2 is read."""
        # Each common case is checked inline, the reader called only for the rest (it names the problem): a
        # resume reads three mappings and eight numbers.
        fields = _fields(expand_rng(state, key), key, _SNAPSHOT_KEYS, optional=("devices",))
        if fields["version"] is not RNG_VERSION:
            read_version(fields["version"], join_key(key, "version"), RNG_VERSION)
        torch_state = fields["torch"]
        if not isinstance(torch_state, Seeded):  # a seed below 2**64 is valid (checked by expand_rng)
            torch_state = read_generator_state(torch_state, join_key(key, "torch"))
        python_state = _python_state(fields["python"], join_key(key, "python"))
        numpy_state = None if fields["numpy"] is None else _numpy_state(fields["numpy"], join_key(key, "numpy"))
        devices = devices_from_plain(fields["devices"], join_key(key, "devices")) if "devices" in fields else {}
        return cls(torch_state, python_state, numpy_state, devices)


def expanded(rng: GlobalRng) -> dict[str, Any]:
    """``rng`` as :meth:`GlobalRng.to_plain` saves it but with its blobs as bytes (``tracker_core/data/_compact.py``):
    what a loader state's snapshot is compacted from, and what ``ResumeRngCheck`` compares."""
    fmt, words, gauss_next = rng.python_state
    packed_words = _bytes(words) if isinstance(words, (bytes, str)) else struct.pack(f"<{_MT_WORDS}I", *words)
    numpy = None
    if rng.numpy_state is not None:
        algorithm, keys, pos, has_gauss, cached_gaussian = rng.numpy_state[:5]
        numpy = {
            "algorithm": str(algorithm),
            "keys": Decoded(
                _bytes(keys) if isinstance(keys, (bytes, str)) else _np.asarray(keys, dtype="<u4").tobytes()
            ),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        }
    torch_state = rng.torch_state
    plain = {
        "version": RNG_VERSION,
        "torch": Decoded(
            seeded_state(torch_state) if isinstance(torch_state, Seeded) else tensor_to_bytes(torch_state)
        ),
        "python": {"format": fmt, "words": Decoded(packed_words), "gauss_next": gauss_next},
        "numpy": numpy,
    }
    if rng.devices:
        plain["devices"] = devices_to_plain(rng.devices)
    return plain


def read_generator_state(value: object, key: str, like: torch.Generator | None = None) -> torch.Tensor:
    """A state for generator ``like`` (default: the CPU RNG) from a blob (base64 text, or ``Decoded`` bytes:
    ``tracker_core/data/_compact.py``), checked on a scratch generator."""
    data = blob_bytes_of(value, key)
    state = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    return checked_generator_state(state, key, like)


def checked_generator_state(state: torch.Tensor, key: str, like: torch.Generator | None = None) -> torch.Tensor:
    """``state``, a ``uint8`` tensor, checked by loading it into a scratch generator like ``like`` (default: CPU)."""
    try:
        torch.Generator(device="cpu" if like is None else like.device).set_state(state)
    except RuntimeError as exc:
        what = "a torch CPU RNG state" if like is None else f"a state for a {like.device} torch.Generator"
        raise ProgressStateError(key, f"not {what} ({exc})") from None
    return state


def _fields(value: object, key: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> Mapping[str, Any]:
    """``read_mapping``, with a dict of exactly the ``required`` keys taken without it."""
    if type(value) is dict and value.keys() == set(required):
        return value
    return read_mapping(value, key, required=required, optional=optional)


def _python_state(value: object, key: str) -> tuple[Any, ...]:
    """A Python ``random`` state with its words packed (see :class:`GlobalRng`), checked as ``random.setstate``
    checks it: format 2 or 3 and a position (the last word) of at most 624; the other words are any 32 bits."""
    fields = _fields(value, key, _PYTHON_KEYS)
    fmt = fields["format"]
    if type(fmt) is not int or fmt not in _PYTHON_FORMATS:
        fmt = read_int(fmt, join_key(key, "format"))
    words = _packed(fields["words"], join_key(key, "words"), 4 * _MT_WORDS)
    gauss_next = fields["gauss_next"]
    if gauss_next is not None and type(gauss_next) is not float:
        gauss_next = read_float_or_none(gauss_next, join_key(key, "gauss_next"))
    if fmt not in _PYTHON_FORMATS:
        raise ProgressStateError(key, f"not a Python random state (format {fmt}; Random.setstate reads 2 and 3)")
    # the last word: of the text, its last two groups of four characters
    last = binascii.a2b_base64(words[-8:], strict_mode=True) if isinstance(words, str) else words
    position = int.from_bytes(last[-4:], "little")
    if position > _MT_WORDS - 1:
        raise ProgressStateError(key, f"not a Python random state (its position {position} is past its 624 words)")
    return (fmt, words, gauss_next)


def _unpacked(state: tuple[Any, ...]) -> tuple[Any, ...]:
    """``state`` with its words as ``random.setstate`` takes them (625 ints)."""
    fmt, words, gauss_next = state
    if not isinstance(words, (bytes, str)):
        return state
    return (fmt, struct.unpack(f"<{_MT_WORDS}I", _bytes(words)), gauss_next)


def _numpy_unpacked(state: tuple[Any, ...]) -> tuple[Any, ...]:
    """``state`` with its keys as ``RandomState.set_state`` takes them (624 uint32)."""
    keys = state[1]
    if not isinstance(keys, (bytes, str)):
        return state
    return (state[0], _np.frombuffer(_bytes(keys), dtype="<u4").astype(_np.uint32), *state[2:])


def _packed(value: object, key: str, size: int) -> bytes | str:
    """A blob of ``size`` bytes as read: ``Decoded`` bytes as they are, base64 text checked but not decoded."""
    if isinstance(value, Decoded):
        return blob_bytes_of(value, key, size=size)
    return checked_text(value, key, size)


def _bytes(packed: bytes | str) -> bytes:
    """The bytes of what :func:`_packed` gave."""
    return binascii.a2b_base64(packed, strict_mode=True) if isinstance(packed, str) else bytes(packed)


def _numpy_state(value: object, key: str) -> tuple[Any, ...]:
    """A NumPy RandomState state; without numpy it is checked field by field and kept as read (not applied)."""
    fields = _fields(value, key, _NUMPY_KEYS)
    algorithm = fields["algorithm"]
    if type(algorithm) is not str:
        algorithm = read_str(algorithm, join_key(key, "algorithm"))
    keys = _packed(fields["keys"], join_key(key, "keys"), 4 * _NP_WORDS)
    pos = fields["pos"]
    if type(pos) is not int or not 0 <= pos <= _NP_WORDS:
        pos = read_int(pos, join_key(key, "pos"), minimum=0)
    if pos > _NP_WORDS:  # NumPy accepts any pos and then reads past its 624 words at the next draw
        raise ProgressStateError(join_key(key, "pos"), f"must be <= {_NP_WORDS}, got {pos}")
    has_gauss = fields["has_gauss"]
    if type(has_gauss) is not int or not 0 <= has_gauss <= INT32_MAX:  # NumPy reads it into a C int
        has_gauss = read_int(has_gauss, join_key(key, "has_gauss"), minimum=0, maximum=INT32_MAX)
    cached = fields["cached_gaussian"]
    if not isinstance(cached, float):
        raise ProgressStateError(join_key(key, "cached_gaussian"), f"expected a float, got {type(cached).__name__}")
    if algorithm != _NP_ALGORITHM:  # all that RandomState.set_state checks beyond the fields read above
        raise ProgressStateError(join_key(key, "algorithm"), f"expected {_NP_ALGORITHM!r}, got {shown(algorithm)}")
    return (algorithm, keys, pos, has_gauss, cached)
