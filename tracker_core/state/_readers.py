"""Strict readers of plain data: each takes a value and the dotted key path it was found at, and returns it
typed or raises :class:`ProgressStateError` naming that key (``keys_under`` prefixes the keys of a part's)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeGuard

from tracker_core._errors import ProgressStateError

INT32_MAX = 2**31 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1


def type_name(value: object) -> str:
    return type(value).__name__


SHOWN_CHARS = 40  # of a str in an error message
SHOWN_ITEMS = 4  # of a list, tuple or dict
SHOWN_DEPTH = 2  # levels of nested lists, tuples and dicts


def shown(value: object, depth: int = SHOWN_DEPTH) -> str:
    """``value``'s ``repr`` as an error message shows it, bounded whatever a hostile entry holds: a str cut to
    ``SHOWN_CHARS`` characters, an int of 100 bits or more given by its size, the first ``SHOWN_ITEMS`` items
    of a list, tuple or dict to ``depth`` levels, any other value by its type."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, float):
        return float.__repr__(value)
    if isinstance(value, int):
        return int.__repr__(value) if value.bit_length() < 100 else f"an int of {value.bit_length()} bits"
    if isinstance(value, str):
        cut = str.__repr__(value[:SHOWN_CHARS])
        return cut if len(value) <= SHOWN_CHARS else f"{cut}... ({len(value)} characters)"
    if type(value) is list or type(value) is tuple:
        brackets = "[]" if type(value) is list else "()"
        items = [shown(item, depth - 1) for item in value[:SHOWN_ITEMS]] if depth else []
    elif type(value) is dict:
        brackets = "{}"
        pairs = itertools.islice(value.items(), SHOWN_ITEMS if depth else 0)
        items = [f"{shown(name, depth - 1)}: {shown(item, depth - 1)}" for name, item in pairs]
    else:
        return f"{type_name(value)} object"
    if len(value) > len(items):
        items.append(f"... ({len(value)} items)")
    return brackets[0] + ", ".join(items) + brackets[1]


def is_mapping(value: object) -> TypeGuard[Mapping[Any, Any]]:
    """``isinstance(value, Mapping)``, a plain ``dict`` answered without the ABC check (a tenth of its time)."""
    return type(value) is dict or isinstance(value, Mapping)


def join_key(parent: str, child: str) -> str:
    """``join_key("epoch", "torch") == "epoch.torch"``; ``join_key("", "kind") == "kind"``."""
    return f"{parent}.{child}" if parent else child


@contextmanager
def keys_under(prefix: str) -> Iterator[None]:
    """Prefix the key of a ProgressStateError raised in the block with ``prefix`` (e.g. ``ranks.1``)."""
    try:
        yield
    except ProgressStateError as error:
        if not prefix:
            raise
        raise ProgressStateError(join_key(prefix, error.key) if error.key else prefix, error.problem) from None


def read_mapping(
    value: object, key: str, *, required: Iterable[str], optional: Iterable[str] = ()
) -> Mapping[str, Any]:
    """``value`` as a mapping with exactly the ``required`` keys (distinct names) plus any of ``optional``."""
    if not is_mapping(value):
        raise ProgressStateError(key, f"expected a dict, got {type_name(value)}")
    required = tuple(required)
    for name in required:
        if name not in value:
            raise ProgressStateError(join_key(key, name), "missing")
    if len(value) == len(required):  # every required key is there, so there is no other
        return value
    allowed = {*required, *optional}
    for name in value:
        if name not in allowed:
            named = name if isinstance(name, str) else shown(name)
            raise ProgressStateError(join_key(key, named), f"unknown key; expected only {sorted(allowed)}")
    return value


def read_list(value: object, key: str) -> list[Any]:
    if not isinstance(value, list):
        raise ProgressStateError(key, f"expected a list, got {type_name(value)}")
    return value


def read_int(value: object, key: str, *, minimum: int | None = None, maximum: int = INT64_MAX) -> int:
    """An ``int`` (not a bool) that fits in int64, at least ``minimum`` if given; ``maximum=UINT64_MAX``
    for a torch seed (a uint64), ``INT32_MAX`` for a field NumPy reads into a C ``int``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProgressStateError(key, f"expected an int, got {type_name(value)}")
    if not INT64_MIN <= value <= maximum:
        raise ProgressStateError(key, f"{shown(value)} is outside {INT64_MIN}..{maximum}")
    if minimum is not None and value < minimum:
        raise ProgressStateError(key, f"must be >= {minimum}, got {value}")
    return value


def read_counts(value: object, key: str, names: Sequence[str]) -> dict[str, int]:
    """A mapping of exactly ``names``, each a non-negative ``int``, in that order."""
    fields = read_mapping(value, key, required=names)
    return {name: read_int(fields[name], join_key(key, name), minimum=0) for name in names}


def read_version(value: object, key: str, current: int) -> int:
    """A saved form's version, which must be ``current``: 0.1.0 reads only what it writes (docs/schema.md)."""
    version = read_int(value, key)
    if version > current:
        raise ProgressStateError(
            key, f"version {version} was written by a newer progress-tracker; this one reads up to {current}"
        )
    if version != current:
        raise ProgressStateError(
            key, f"version {version} was written by a development build; this release reads version {current} only"
        )
    return version


def read_str(value: object, key: str) -> str:
    if not isinstance(value, str):
        raise ProgressStateError(key, f"expected a str, got {type_name(value)}")
    return value


def read_bool(value: object, key: str) -> bool:
    if not isinstance(value, bool):
        raise ProgressStateError(key, f"expected a bool, got {shown(value)}")
    return value


def read_float_or_none(value: object, key: str) -> float | None:
    if value is None or isinstance(value, float):
        return value
    raise ProgressStateError(key, f"expected a float or None, got {type_name(value)}")
