"""The short form of RNG snapshots and loader states: each blob a short text, the generator states in a loader's
own state stored as differences from its sampler's (docs/schema.md, ``train_loaders``). An expanded state
(:func:`expand_rng`, :func:`expand_loader`) holds each short form as :class:`Decoded` bytes or a :class:`Seeded`
seed, plain base64 and anything malformed as it is, for its reader to check or refuse."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tracker_core._errors import ProgressStateError
from tracker_core.state._blobs import blob_bytes, seed_in, seeded_state, short_bytes, short_text
from tracker_core.state._codec import MAX_DEPTH, bytes_to_text, text_to_bytes
from tracker_core.state._readers import is_mapping, join_key

RNG_VERSION = 2  # of an RNG snapshot, the one saved and read
_RNG_BLOBS = (("torch",), ("python", "words"), ("numpy", "keys"))
_SAMPLER = ("sampler.generator", "generator")  # the sampler's generator among ``generators``: the first of these saved
_OWN = ("epoch", "loader_state")  # a loader's own state: its generator states relative to the sampler's
_TENSOR = "__tensor__"  # tracker_core/state/_codec.py's tag of a tensor in plain data


class Decoded(bytes):
    """A blob's bytes in an expanded state; never in saved data (which holds only text), so a reader takes them
    without decoding."""


class Seeded(int):
    """A torch CPU generator's state as the seed it was just seeded with (the ``"s:"`` form expanded):
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


def compact_rng(expanded: Mapping[str, Any]) -> dict[str, Any]:
    """An expanded snapshot (``tracker_core/data/_rng.py``, :func:`expanded`) as saved."""
    out = dict(expanded)
    for path in _RNG_BLOBS:
        data = _raw(expanded, path)
        if data is not None:
            _put(out, path, short_text(data))
    return out


def expand_rng(value: object, key: str = "") -> Any:
    """A saved snapshot expanded; one of another version as it is, for its reader to refuse."""
    if not is_mapping(value) or value.get("version") != RNG_VERSION:
        return value
    out = dict(value)
    for path in _RNG_BLOBS:
        text = _get(value, path)
        if isinstance(text, str):
            _put(out, path, _expanded(text, join_key(key, ".".join(path)), None))
    return out


def compact_loader(state: Mapping[str, Any]) -> dict[str, Any]:
    """A loader state as written (each generator state base64 text) with its blobs short."""
    out = dict(state, generators={path: short_text(blob_bytes(text, "")) for path, text in state["generators"].items()})
    epoch = state["epoch"]
    if epoch is not None and epoch.get("loader_state") is not None:
        sampler = _sampler_state(state)

        def short(tensor: Mapping[str, Any], key: str) -> object:  # a uint8 tensor's: a generator state
            return (
                short_text(blob_bytes(tensor["data"], key), sampler)
                if tensor.get("dtype") == "uint8"
                else tensor["data"]
            )

        _put(out, _OWN, _tensor_texts(epoch["loader_state"], short, ""))
    return out


def expand_loader(value: object, key: str = "") -> Any:
    """A loader state expanded."""
    if not is_mapping(value):
        return value
    out = dict(value)
    epoch, generators = value.get("epoch"), value.get("generators")
    if is_mapping(generators):  # anything malformed as it is, for its reader to refuse
        out["generators"] = {
            path: _expanded(text, join_key(key, f"generators.{path}"), None) if isinstance(text, str) else text
            for path, text in generators.items()
        }
    if is_mapping(epoch) and "loader_state" in epoch:  # its tensors base64 again, for its decoder
        sampler = _sampler_state(out)

        def plain(tensor: Mapping[str, Any], where: str) -> object:
            data = _expanded(tensor["data"], where, sampler)  # malformed, or a difference without its base: as it is
            return data if isinstance(data, str) else bytes_to_text(blob_bytes_of(data, where))

        _put(out, _OWN, _tensor_texts(epoch["loader_state"], plain, join_key(key, ".".join(_OWN))))
    return out


def _sampler_state(state: Mapping[str, Any]) -> bytes | None:
    """The base of the generator states in ``epoch.loader_state``: the sampler's generator in ``generators``
    (None: none, or a damaged one, which its reader refuses)."""
    generators = state.get("generators")
    names = [name for name in _SAMPLER if is_mapping(generators) and name in generators]
    return _raw(generators, (names[0],)) if names else None


def _tensor_texts(value: object, text: Callable[[Mapping[str, Any], str], object], key: str, depth: int = 0) -> Any:
    """A copy of plain data ``value`` (at ``key``) with each tagged tensor's ``data`` text as ``text(tensor, key of
    the data)`` gives it; anything else, and what lies deeper than ``from_plain`` reads, as it is."""
    if isinstance(value, list) and depth < MAX_DEPTH:
        return [_tensor_texts(item, text, join_key(key, str(i)), depth + 1) for i, item in enumerate(value)]
    if not is_mapping(value) or depth >= MAX_DEPTH:
        return value
    tensor = value.get(_TENSOR)
    if len(value) == 1 and is_mapping(tensor) and isinstance(tensor.get("data"), str):
        return {_TENSOR: dict(tensor, data=text(tensor, join_key(key, f"{_TENSOR}.data")))}
    return {name: _tensor_texts(item, text, join_key(key, str(name)), depth + 1) for name, item in value.items()}


def _expanded(text: str, key: str, base: bytes | None) -> object:
    """A blob as its reader takes it: a short form as :class:`Decoded` bytes or a :class:`Seeded` seed, else as it
    is (a difference that cannot be applied too, for its reader to refuse)."""
    seed = seed_in(text)
    if seed is not None:
        return Seeded(seed)
    data = short_bytes(text, key, base)
    return text if data is None else Decoded(data)


def _get(value: object, path: tuple[str, ...]) -> object:
    for name in path:
        if not is_mapping(value):
            return None
        value = value.get(name)
    return value


def _put(value: dict[str, Any], path: tuple[str, ...], text: object) -> None:
    """Set ``text`` at ``path``, copying the mappings along it (those of the state copied from stay as they are)."""
    for name in path[:-1]:
        value[name] = dict(value[name])
        value = value[name]
    value[path[-1]] = text


def _raw(value: object, path: tuple[str, ...]) -> bytes | None:
    """The bytes of the blob at ``path`` of a snapshot or mapping, or None where there is none readable."""
    text = _get(value, path)
    if isinstance(text, (Decoded, Seeded)):
        return blob_bytes_of(text, "")
    try:
        return blob_bytes(text, "") if isinstance(text, str) else None
    except ProgressStateError:  # a damaged base: the text relative to it is refused as missing its base
        return None
