"""Plain data (survives ``json`` and ``torch.load(weights_only=True)``) for data-position states: base64 blobs and
tagged tensors. Every reader raises :class:`ProgressStateError` naming the dotted key path."""

from __future__ import annotations

import base64
import binascii
import collections
from collections.abc import Mapping
from typing import Any

import torch

from tracker_core._errors import ProgressStateError
from tracker_core.state._readers import (
    INT64_MIN,
    UINT64_MAX,
    is_mapping,
    join_key,
    read_int,
    read_list,
    read_mapping,
    read_str,
    shown,
    type_name,
)

_TENSOR_TAG = "__tensor__"
_TUPLE_TAG = "__tuple__"

# What a saved state can legitimately hold: plain numbers. Quantized, complex, sub-byte,
# float8 and other exotic dtypes are refused (torch.frombuffer with some of them corrupts memory).
_DTYPE_NAMES = "bool uint8 int8 int16 int32 int64 uint16 uint32 uint64 float16 bfloat16 float32 float64"
TENSOR_DTYPES: dict[str, torch.dtype] = {name: getattr(torch, name) for name in _DTYPE_NAMES.split()}
MAX_DEPTH = 64  # nesting of dicts and lists in decoded plain data
MAX_LIST_LENGTH = 100_000  # items of one list or dict
MAX_NODES = 1_000_000  # values in one decoded state, all levels together
_TOO_MANY = f"more than {MAX_NODES} values in all; a saved state holds far fewer"
MAX_BLOB_BYTES = 64 * 2**20  # one base64 blob (a tensor's bytes, an RNG state)
MAX_TENSOR_DIMS = 16
_MAX_BLOB_TEXT = 4 * ((MAX_BLOB_BYTES + 2) // 3)
_BASE64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_SCALARS = frozenset((type(None), bool, float, str))  # exactly these types: from_plain returns them as they are
_PADDING = ("", "=", "==")  # by the bytes missing from the last group of three


# --- writing ---------------------------------------------------------------------------


def bytes_to_text(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def tensor_to_bytes(tensor: torch.Tensor) -> bytes:
    """The raw bytes of a tensor on any device, in any layout, copied through a tensor over a bytearray."""
    out = bytearray(tensor.nbytes)
    if out:  # torch.frombuffer refuses an empty buffer
        torch.frombuffer(out, dtype=tensor.dtype).copy_(tensor.reshape(-1))
    return bytes(out)


def tensor_to_text(tensor: torch.Tensor) -> str:
    """Base64 text of a tensor's bytes, e.g. an RNG state (a ``uint8`` tensor)."""
    return bytes_to_text(tensor_to_bytes(tensor))


def to_plain(value: Any, key: str = "") -> Any:
    """Plain data for a nested state holding tensors and tuples (e.g. a StatefulDataLoader's): a tensor becomes
    ``{"__tensor__": {"dtype", "shape", "data"}}``, a tuple ``{"__tuple__": [...]}``; ``TypeError`` naming the path
    for anything else that is not plain data (or a dict key that is not ``str``)."""
    if value is None:
        return None
    for plain in (bool, int, float, str):  # bool before int; subclasses (np.float64) become plain
        if isinstance(value, plain):
            return plain(value)
    if isinstance(value, torch.Tensor):
        return {
            _TENSOR_TAG: {
                "dtype": str(value.dtype).removeprefix("torch."),
                "shape": list(value.shape),
                "data": tensor_to_text(value),
            }
        }
    if isinstance(value, tuple):
        return {_TUPLE_TAG: [to_plain(item, join_key(key, str(i))) for i, item in enumerate(value)]}
    if isinstance(value, list):
        return [to_plain(item, join_key(key, str(i))) for i, item in enumerate(value)]
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for name, item in value.items():
            if not isinstance(name, str):
                raise TypeError(f"{key or '<root>'}: dict key {shown(name)} is not a str; cannot save it as plain data")
            if name in (_TENSOR_TAG, _TUPLE_TAG):
                raise TypeError(f"{key or '<root>'}: dict key {name!r} is reserved for tagging")
            out[name] = to_plain(item, join_key(key, name))
        return out
    raise TypeError(f"{key or '<root>'}: a {type_name(value)} cannot be saved as plain data")


# --- reading ---------------------------------------------------------------------------


def text_to_bytes(value: object, key: str, *, size: int | None = None) -> bytes:
    """Decode base64 text; ``size`` is the exact byte length required, if any. The text's length is checked
    before decoding: at most ``MAX_BLOB_BYTES`` bytes, and exactly the length ``size`` bytes encode to."""
    if not isinstance(value, str):
        raise ProgressStateError(key, f"expected base64 text, got {type_name(value)}")
    if value.startswith("x:"):  # tracker_core/state/_blobs.py: a difference not applied before reaching here
        raise ProgressStateError(
            key, "a difference from a related RNG state: damaged, or that state is missing or damaged"
        )
    expected = None if size is None else 4 * ((size + 2) // 3)
    if expected is not None and len(value) != expected:
        raise ProgressStateError(
            key, f"expected {size} bytes ({expected} base64 characters), got {len(value)} characters"
        )
    if len(value) > _MAX_BLOB_TEXT:
        raise ProgressStateError(key, f"a blob of {len(value)} base64 characters; at most {MAX_BLOB_BYTES} bytes")
    try:
        data = binascii.a2b_base64(value, strict_mode=True)  # base64.b64decode(validate=True), less its wrapping
    except ValueError:  # binascii.Error, and a str that is not ASCII
        raise ProgressStateError(key, "not valid base64 text") from None
    if size is not None and len(data) != size:
        raise ProgressStateError(key, f"expected {size} bytes, got {len(data)}")
    return data


def checked_text(value: object, key: str, size: int) -> str | bytes:
    """Base64 text that :func:`text_to_bytes` decodes to exactly ``size`` bytes, checked without decoding it
    (alphabet, length, padding: a fifth of a decode's time); where that check is not met, what
    ``text_to_bytes(value, key, size=size)`` gives: its error, or the bytes."""
    if isinstance(value, str):
        pad = -size % 3
        body = len(value) - pad
        if (
            len(value) == 4 * ((size + 2) // 3)
            and value.endswith(_PADDING[pad])
            and value.isascii()
            and not value[:body].encode("ascii").translate(None, _BASE64_ALPHABET)
        ):
            return value
    return text_to_bytes(value, key, size=size)


def bytes_to_tensor(data: bytes, dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    """A 1-d CPU tensor of ``dtype`` over a copy of ``data``."""
    return torch.frombuffer(bytearray(data), dtype=dtype) if data else torch.empty(0, dtype=dtype)


def text_to_byte_tensor(value: object, key: str, *, size: int | None = None) -> torch.Tensor:
    """A ``uint8`` CPU tensor from base64 text (the form RNG states take)."""
    return bytes_to_tensor(text_to_bytes(value, key, size=size))


def from_plain(value: Any, key: str = "") -> Any:
    """Inverse of :func:`to_plain`; ProgressStateError naming the key for a malformed tag or for data beyond the
    limits above (checked before any recursion or allocation; int64/uint64 ints)."""
    return _from_plain(value, key, 0, [MAX_NODES], decode=True)


def check_plain(value: object, key: str = "") -> None:
    """Raise what :func:`from_plain` would raise for ``value``'s plain data, decoding no tag."""
    _from_plain(value, key, 0, [MAX_NODES], decode=False)


def _from_plain(value: Any, key: str, depth: int, budget: list[int], decode: bool) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise ProgressStateError(key, _TOO_MANY)
    if value is None or isinstance(value, (bool, float, str)):
        return value
    if isinstance(value, int):
        if not INT64_MIN <= value <= UINT64_MAX:  # int64, and uint64 for seeds
            raise ProgressStateError(key, f"{shown(value)} does not fit 64 bits")
        return value
    if depth >= MAX_DEPTH:
        raise ProgressStateError(key, f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, list):
        _check_length(value, key)
        items = (_from_plain(item, join_key(key, str(i)), depth + 1, budget, decode) for i, item in enumerate(value))
        if decode:
            return list(items)
        collections.deque(items, maxlen=0)  # checked, not copied
        return value
    if not is_mapping(value):
        raise ProgressStateError(key, f"expected plain data, got {type_name(value)}")
    if decode and len(value) == 1 and _TENSOR_TAG in value:
        return _tensor_from_plain(value[_TENSOR_TAG], join_key(key, _TENSOR_TAG))
    if decode and len(value) == 1 and _TUPLE_TAG in value:  # the list's items as deep as the tag's would be
        inner = join_key(key, _TUPLE_TAG)
        return tuple(_from_plain(read_list(value[_TUPLE_TAG], inner), inner, depth, budget, decode))
    _check_length(value, key)
    out: dict[str, Any] = {}
    for name, item in value.items():
        if not isinstance(name, str):
            raise ProgressStateError(key, f"dict key {shown(name)} is not a str")
        kind = type(item)
        if kind in _SCALARS or (kind is int and INT64_MIN <= item <= UINT64_MAX):  # most values: no call, no key
            budget[0] -= 1
            if budget[0] < 0:
                raise ProgressStateError(join_key(key, name), _TOO_MANY)
        else:
            item = _from_plain(item, join_key(key, name), depth + 1, budget, decode)
        if decode:
            out[name] = item
    return out if decode else value


def _check_length(value: list[Any] | Mapping[Any, Any], key: str) -> None:
    if len(value) > MAX_LIST_LENGTH:
        raise ProgressStateError(key, f"{len(value)} items; a saved state holds at most {MAX_LIST_LENGTH}")


def _tensor_from_plain(value: object, key: str) -> torch.Tensor:
    fields = read_mapping(value, key, required=("dtype", "shape", "data"))
    dtype_name = read_str(fields["dtype"], join_key(key, "dtype"))
    dtype = TENSOR_DTYPES.get(dtype_name)
    if dtype is None:
        raise ProgressStateError(
            join_key(key, "dtype"),
            f"dtype {shown(dtype_name)} is not one a saved state holds; expected one of {sorted(TENSOR_DTYPES)}",
        )
    shape_key = join_key(key, "shape")
    shape = read_list(fields["shape"], shape_key)
    if len(shape) > MAX_TENSOR_DIMS:
        raise ProgressStateError(shape_key, f"{len(shape)} dimensions; at most {MAX_TENSOR_DIMS}")
    dims = [read_int(dim, join_key(shape_key, str(i)), minimum=0) for i, dim in enumerate(shape)]
    size = dtype.itemsize
    for dim in dims:
        size *= dim
        if size > MAX_BLOB_BYTES:
            raise ProgressStateError(shape_key, f"{shape} holds more than {MAX_BLOB_BYTES} bytes")
    data = text_to_bytes(fields["data"], join_key(key, "data"), size=size)
    if dtype == torch.bool and data.strip(b"\x00\x01"):
        raise ProgressStateError(join_key(key, "data"), "a bool tensor holds bytes other than 0 and 1")
    return bytes_to_tensor(data, dtype).reshape(dims)
