"""Plain data for data-position states: base64 blobs, tagged tensors, strict readers.

Everything written here is ints, floats, bools, ``str``, ``None``, lists and
str-keyed dicts, so a state survives ``json`` and ``torch.load(weights_only=True)``.
Every reader raises :class:`ProgressStateError` naming the dotted key path.
"""

from __future__ import annotations

import base64
import binascii
import ctypes
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from tracker_core._errors import ProgressStateError

_TENSOR_TAG = "__tensor__"
_TUPLE_TAG = "__tuple__"


def join_key(parent: str, child: str) -> str:
    """``join_key("epoch", "torch") == "epoch.torch"``; ``join_key("", "kind") == "kind"``."""
    return f"{parent}.{child}" if parent else child


def _type_name(value: object) -> str:
    return type(value).__name__


# --- writing ---------------------------------------------------------------------------


def bytes_to_text(data: bytes) -> str:
    """Base64 text for a byte blob."""
    return base64.b64encode(data).decode("ascii")


def tensor_to_bytes(tensor: torch.Tensor) -> bytes:
    """The raw bytes of a tensor (copied to CPU, contiguous), in about a microsecond."""
    flat = tensor.detach().to("cpu").contiguous()
    size = flat.numel() * flat.element_size()
    return ctypes.string_at(flat.data_ptr(), size) if size else b""


def tensor_to_text(tensor: torch.Tensor) -> str:
    """Base64 text of a tensor's bytes, e.g. an RNG state (a ``uint8`` tensor)."""
    return bytes_to_text(tensor_to_bytes(tensor))


def to_plain(value: Any, key: str = "") -> Any:
    """Plain data for a nested state holding tensors and tuples (e.g. a StatefulDataLoader's).

    A tensor becomes ``{"__tensor__": {"dtype", "shape", "data"}}``, a tuple
    ``{"__tuple__": [...]}``. Raises ``TypeError`` naming the path for anything else
    that is not plain data (or a dict key that is not ``str``).
    """
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
                raise TypeError(f"{key or '<root>'}: dict key {name!r} is not a str; cannot save it as plain data")
            if name in (_TENSOR_TAG, _TUPLE_TAG):
                raise TypeError(f"{key or '<root>'}: dict key {name!r} is reserved for tagging")
            out[name] = to_plain(item, join_key(key, name))
        return out
    raise TypeError(f"{key or '<root>'}: a {_type_name(value)} cannot be saved as plain data")


# --- reading ---------------------------------------------------------------------------


def text_to_bytes(value: object, key: str, *, size: int | None = None) -> bytes:
    """Decode base64 text; ``size`` is the exact byte length required, if any."""
    if not isinstance(value, str):
        raise ProgressStateError(key, f"expected base64 text, got {_type_name(value)}")
    try:
        data = base64.b64decode(value.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ProgressStateError(key, "not valid base64 text") from None
    if size is not None and len(data) != size:
        raise ProgressStateError(key, f"expected {size} bytes, got {len(data)}")
    return data


def text_to_byte_tensor(value: object, key: str, *, size: int | None = None) -> torch.Tensor:
    """A ``uint8`` CPU tensor from base64 text (the form RNG states take)."""
    data = text_to_bytes(value, key, size=size)
    if not data:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def from_plain(value: Any, key: str = "") -> Any:
    """Inverse of :func:`to_plain`; raises ProgressStateError for malformed tags."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [from_plain(item, join_key(key, str(i))) for i, item in enumerate(value)]
    if not isinstance(value, Mapping):
        raise ProgressStateError(key, f"expected plain data, got {_type_name(value)}")
    if len(value) == 1 and _TENSOR_TAG in value:
        return _tensor_from_plain(value[_TENSOR_TAG], join_key(key, _TENSOR_TAG))
    if len(value) == 1 and _TUPLE_TAG in value:
        items = value[_TUPLE_TAG]
        inner = join_key(key, _TUPLE_TAG)
        if not isinstance(items, list):
            raise ProgressStateError(inner, f"expected a list, got {_type_name(items)}")
        return tuple(from_plain(item, join_key(inner, str(i))) for i, item in enumerate(items))
    out: dict[str, Any] = {}
    for name, item in value.items():
        if not isinstance(name, str):
            raise ProgressStateError(key, f"dict key {name!r} is not a str")
        out[name] = from_plain(item, join_key(key, name))
    return out


def _tensor_from_plain(value: object, key: str) -> torch.Tensor:
    fields = read_mapping(value, key, required=("dtype", "shape", "data"))
    dtype_name = read_str(fields["dtype"], join_key(key, "dtype"))
    dtype = getattr(torch, dtype_name, None)
    if not isinstance(dtype, torch.dtype):
        raise ProgressStateError(join_key(key, "dtype"), f"unknown torch dtype {dtype_name!r}")
    shape_key = join_key(key, "shape")
    shape = fields["shape"]
    if not isinstance(shape, list):
        raise ProgressStateError(shape_key, f"expected a list of ints, got {_type_name(shape)}")
    dims = [read_int(dim, join_key(shape_key, str(i)), minimum=0) for i, dim in enumerate(shape)]
    numel = 1
    for dim in dims:
        numel *= dim
    itemsize = torch.empty((), dtype=dtype).element_size()
    data = text_to_bytes(fields["data"], join_key(key, "data"), size=numel * itemsize)
    if numel == 0:
        return torch.empty(dims, dtype=dtype)
    return torch.frombuffer(bytearray(data), dtype=dtype).reshape(dims)


def read_mapping(
    value: object, key: str, *, required: Iterable[str], optional: Iterable[str] = ()
) -> Mapping[str, Any]:
    """``value`` as a mapping with exactly the ``required`` keys plus any of ``optional``."""
    if not isinstance(value, Mapping):
        raise ProgressStateError(key, f"expected a mapping, got {_type_name(value)}")
    required = tuple(required)
    allowed = set(required) | set(optional)
    for name in required:
        if name not in value:
            raise ProgressStateError(join_key(key, name), "missing")
    for name in value:
        if name not in allowed:
            shown = name if isinstance(name, str) else repr(name)
            raise ProgressStateError(join_key(key, shown), f"unknown key; expected only {sorted(allowed)}")
    return value


def read_int(value: object, key: str, *, minimum: int | None = None) -> int:
    """An ``int`` (not a bool), at least ``minimum`` if given."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProgressStateError(key, f"expected an int, got {_type_name(value)}")
    if minimum is not None and value < minimum:
        raise ProgressStateError(key, f"must be >= {minimum}, got {value}")
    return value


def read_str(value: object, key: str) -> str:
    """A ``str``."""
    if not isinstance(value, str):
        raise ProgressStateError(key, f"expected a str, got {_type_name(value)}")
    return value


def read_float_or_none(value: object, key: str) -> float | None:
    """A ``float`` or ``None``."""
    if value is None or isinstance(value, float):
        return value
    raise ProgressStateError(key, f"expected a float or None, got {_type_name(value)}")
