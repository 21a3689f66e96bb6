"""The short form of RNG snapshots (version 2) and loader states: each blob a short text, related ones stored as
differences (docs/schema.md, ``train_loaders``, says from which).

The readers check the expanded form: :func:`expand_rng` gives a snapshot in version 1 (plain base64),
:func:`expand_loader` a loader state with plain blobs; anything malformed passes through for them to refuse.
With ``decoded=True`` a short form comes as :class:`Decoded` bytes (or a :class:`Seeded` seed), so a resume
does not encode a blob only to decode it again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tracker_core._errors import ProgressStateError
from tracker_core.state._blobs import blob_bytes, plain_text, seed_in, seeded_state, short_text
from tracker_core.state._codec import text_to_bytes
from tracker_core.state._readers import is_mapping, join_key

RNG_COMPACT_VERSION = 2
_RNG_BLOBS = (("torch",), ("python", "words"), ("numpy", "keys"))
_LOADER = "generator"  # the loader's own generator among ``generators``


class Decoded(bytes):
    """A blob's bytes, decoded from its short text form by ``expand_*(..., decoded=True)``; never in saved
    data (which holds only text), so a reader takes them without decoding."""


class Seeded(int):
    """A torch CPU generator's state as the seed it was just seeded with (the ``"s:"`` form read with ``decoded``):
    its 5,056 bytes are made only where needed; a resume sets a generator with ``manual_seed``. Never saved."""


def blob_bytes_of(value: object, key: str, size: int | None = None) -> bytes:
    """The bytes of a blob as an expanded state holds it: :class:`Decoded` bytes or a :class:`Seeded` state,
    else base64 text (``size``: the exact length required, if any)."""
    if isinstance(value, Seeded):
        value = Decoded(seeded_state(value))
    if not isinstance(value, Decoded):
        return text_to_bytes(value, key, size=size)
    if size is not None and len(value) != size:
        raise ProgressStateError(key, f"expected {size} bytes, got {len(value)}")
    return value


def compact_rng(plain: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A version 1 snapshot as version 2, its blobs relative to the version 1 snapshot ``base`` if given."""
    out = dict(plain)
    for path in _RNG_BLOBS:
        data = _raw(plain, path)
        if data is not None:
            _put(out, path, short_text(data, None if base is None else _raw(base, path)))
    out["version"] = RNG_COMPACT_VERSION
    return out


def expand_rng(value: object, key: str = "", base: Mapping[str, Any] | None = None, *, decoded: bool = False) -> Any:
    """A version 2 snapshot as version 1 (``base``: the version 1 snapshot its differences refer to;
    ``decoded``: short forms as :class:`Decoded` bytes)."""
    if not is_mapping(value) or value.get("version") != RNG_COMPACT_VERSION:
        return value
    out = dict(value)
    for path in _RNG_BLOBS:
        text = _get(value, path)
        if isinstance(text, str) and _is_short(text):  # plain base64 (most Python and NumPy words) stays as it is
            where = join_key(key, ".".join(path))
            _put(out, path, _expanded(text, where, None if base is None else _raw(base, path), decoded))
    out["version"] = 1
    return out


def compact_loader(state: Mapping[str, Any], rng: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A loader state with its blobs short; ``rng``: the version 1 global snapshot saved beside it, if any."""
    out = dict(state)
    epoch = state["epoch"]
    if epoch is not None and epoch["iterator_rng"] is not None:
        out["epoch"] = dict(epoch, iterator_rng=compact_rng(epoch["iterator_rng"], rng))
    for path, base in _loader_blobs(state):
        text = _get(state, path)
        if isinstance(text, str):
            _put(out, path, short_text(blob_bytes(text, ""), None if base is None else _raw(state, base)))
    return out


def expand_loader(value: object, key: str = "", rng: Mapping[str, Any] | None = None, *, decoded: bool = False) -> Any:
    """A loader state with its blobs plain; ``rng``: the version 1 global snapshot saved beside it, if any;
    ``decoded``: short forms as :class:`Decoded` bytes."""
    if not is_mapping(value):
        return value
    out = dict(value)
    epoch = value.get("epoch")
    if is_mapping(epoch):
        iterator = expand_rng(epoch.get("iterator_rng"), join_key(key, "epoch.iterator_rng"), rng, decoded=decoded)
        out["epoch"] = dict(epoch, iterator_rng=iterator)
    for path, base in _loader_blobs(value):
        text = _get(out, path)
        if isinstance(text, str):
            where = join_key(key, ".".join(map(str, path)))
            _put(out, path, _expanded(text, where, None if base is None else _raw(out, base), decoded))
    return out


def _loader_blobs(state: Mapping[str, Any]) -> list[tuple[tuple[str, ...], tuple[str, ...] | None]]:
    """The generator states of a loader state (``epoch.iterator_rng`` aside), each by its path and the path of the
    state it is stored relative to, if any; each base before the states relative to it."""
    generators = state.get("generators")
    blobs: list[tuple[tuple[str, ...], tuple[str, ...] | None]] = []
    if is_mapping(generators):
        blobs += [(("generators", path), None) for path in generators]
    blobs.append((("epoch", "loader_generator"), ("generators", _LOADER)))
    blobs.append((("epoch", "sampler_rng", "torch"), ("epoch", "iterator_rng", "torch")))
    saved = _get(state, ("epoch", "sampler_rng", "generators"))
    if is_mapping(saved):
        blobs += [(("epoch", "sampler_rng", "generators", path), ("generators", path)) for path in saved]
    return blobs


def check_bases(state: object, rng: Mapping[str, Any] | None, key: str) -> None:
    """Raise ``ProgressStateError`` naming the part of ``rng`` (key ``rng.<part>``) that a difference in the
    loader state ``state`` (at ``key``) refers to, when that part is missing (NumPy's may be None)."""
    epoch = state.get("epoch") if is_mapping(state) else None
    iterator = epoch.get("iterator_rng") if is_mapping(epoch) else None
    if not is_mapping(iterator) or iterator.get("version") != RNG_COMPACT_VERSION:
        return
    for path in _RNG_BLOBS:
        text = _get(iterator, path)
        if isinstance(text, str) and text.startswith("x:") and _raw(rng, path) is None:
            where = join_key(key, "epoch.iterator_rng." + ".".join(path))
            raise ProgressStateError(f"rng.{path[0]}", f"missing, but {where} is stored as the difference from it")


def _expanded(value: object, key: str, base: bytes | None, decoded: bool) -> object:
    """A blob's text expanded: plain base64, or with ``decoded`` a short form as :class:`Decoded` bytes
    (a difference that cannot be applied stays text either way, for its reader to refuse)."""
    if not decoded or not _is_short(value):
        return plain_text(value, key, base)
    seed = seed_in(value)
    if seed is not None:
        return Seeded(seed)
    try:
        return Decoded(blob_bytes(value, key, base))
    except ProgressStateError:
        return plain_text(value, key, base)  # raises as without ``decoded``, or gives the difference back


def _is_short(value: object) -> bool:
    """Whether ``value`` is a blob's short form: each is a letter and a colon (``tracker_core/state/_blobs.py``),
    and base64 has no colon."""
    return isinstance(value, str) and value[1:2] == ":"


def _get(value: Mapping[str, Any], path: tuple[str, ...]) -> object:
    item: object = value
    for name in path:
        if not is_mapping(item):
            return None
        item = item.get(name)
    return item


def _put(value: dict[str, Any], path: tuple[str, ...], text: object) -> None:
    """Set ``text`` at ``path``, copying the mappings along it (those of the state copied from stay as they are)."""
    for name in path[:-1]:
        value[name] = dict(value[name])
        value = value[name]
    value[path[-1]] = text


def _raw(value: object, path: tuple[str, ...]) -> bytes | None:
    """The bytes of the blob at ``path`` of a snapshot or mapping, or None where there is none readable."""
    if not is_mapping(value):
        return None
    text = _get(value, path)
    if isinstance(text, Decoded):
        return text
    if isinstance(text, Seeded):
        return seeded_state(text)
    if not isinstance(text, str):
        return None
    try:
        return blob_bytes(text, "")
    except ProgressStateError:  # a damaged base: the text relative to it is refused as missing its base
        return None
