"""Every rank's entry in its own small file beside the checkpoint, which keeps an index of them: the layout,
where a reader looks and what it checks are in docs/distributed.md, "Rank files"."""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import os
import posixpath
import re
import uuid
from abc import abstractmethod
from collections.abc import Collection, Mapping, Sequence
from typing import Any, TypeGuard, TypeVar, overload

import torch

from tracker_core._errors import ProgressStateError
from tracker_core.state._readers import read_int

_INDEX_KEYS = frozenset({"rank_files", "world_size", "save_id", "written_in"})
_OLD_INDEX_KEYS = _INDEX_KEYS | {"loaders"}  # an earlier version's index also summarised the train loaders (ignored)
_TENSOR_INDEX_KEYS = frozenset({"rank_files", "world_size", "save_id", "written_in", "name"})
_RANK_FILE = "rank-{}.json"
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
_SAVE_ID = re.compile(r"[0-9a-f]{32}")
_FILE_KEYS = frozenset({"save_id", "rank", "world_size", "sha256", "entry"})
_Part = TypeVar("_Part")
_MAX_FILE_BYTES = 64 << 20  # an entry is tens of KB; never read a huge file into memory


def is_index(ranks: object) -> TypeGuard[Mapping[str, Any]]:
    """Whether ``ranks`` (an entry's ``"ranks"``) is the index of rank files rather than the entries."""
    return isinstance(ranks, Mapping) and "rank_files" in ranks


def _canonical(entry: object) -> bytes:
    """The entry's JSON the digest is taken over: sorted keys, no spaces, no NaN."""
    return json.dumps(entry, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def write_rank_files(entry: Mapping[str, Any], checkpoint: str | os.PathLike[str]) -> dict[str, Any]:
    """Write each rank's part of the gathered ``entry`` in a new save's folder beside ``checkpoint``; return the
    entry with the index. Call it before the checkpoint is written, :func:`remove_other_saves` after."""
    ranks = entry["ranks"]
    index = _new_save(checkpoint, uuid.uuid4().hex, len(ranks))
    for rank, part in enumerate(ranks):
        document = {
            "save_id": index["save_id"],
            "rank": rank,
            "world_size": len(ranks),
            "sha256": hashlib.sha256(_canonical(part)).hexdigest(),
            "entry": part,
        }
        text = json.dumps(document, sort_keys=True, allow_nan=False)
        _write(_join(index["written_in"], _RANK_FILE.format(rank)), text.encode())
    return {**entry, "ranks": index}


def _new_save(checkpoint: str | os.PathLike[str], save_id: str, world_size: int) -> dict[str, Any]:
    """Create save ``save_id``'s folder beside ``checkpoint``; return the index of its files."""
    root = _ranks_root(os.fspath(checkpoint))
    folder = _join(root, save_id)
    filesystem, where = _storage(folder)
    filesystem.makedirs(where, exist_ok=True)
    return {
        "rank_files": posixpath.join(os.path.basename(root), save_id),
        "world_size": world_size,
        "save_id": save_id,
        "written_in": folder,
    }


def remove_other_saves(checkpoint: str | os.PathLike[str], keep: str | Collection[str] | None) -> None:
    """Remove the ``<save_id>`` folders under ``<checkpoint>.ranks`` other than ``keep`` (one save id, several,
    or None: all)."""
    kept = {keep} if isinstance(keep, str) else set(keep or ())
    filesystem, root = _storage(_ranks_root(os.fspath(checkpoint)))
    if not filesystem.isdir(root):
        return
    for path in filesystem.ls(root, detail=False):
        name = posixpath.basename(path.rstrip("/"))
        if name not in kept and _SAVE_ID.fullmatch(name):
            filesystem.rm(posixpath.join(root, name), recursive=True)
    if not kept and not filesystem.ls(root, detail=False):
        filesystem.rm(root, recursive=True)


def with_rank_files(
    entry: object,
    checkpoint: str | os.PathLike[str] | None = None,
    *,
    folders: Sequence[str | os.PathLike[str]] = (),
) -> object:
    """``entry`` with its index of rank files replaced by a :class:`RankFiles` reading them lazily; any other
    entry as it is. ``checkpoint``: the path (or URL) it was read from, if known; ``folders``: other folders to
    look in. A malformed index, or files found nowhere, raise ``ProgressStateError`` naming ``ranks``."""
    if not isinstance(entry, Mapping) or not is_index(entry.get("ranks")):
        return entry
    return {**entry, "ranks": RankFiles.of(entry["ranks"], checkpoint, folders=folders)}


class _LazyRanks(Sequence[_Part]):
    """The saved ranks' parts, index = rank, each read from its file (``_load``) when first asked for."""

    def __init__(self, folder: str, world_size: int, save_id: str) -> None:
        self.folder = folder
        self.world_size = world_size
        self.save_id = save_id
        self._read: dict[int, _Part] = {}

    def __len__(self) -> int:
        return self.world_size

    @overload
    def __getitem__(self, index: int) -> _Part: ...
    @overload
    def __getitem__(self, index: slice) -> list[_Part]: ...
    def __getitem__(self, index: int | slice) -> _Part | list[_Part]:
        if isinstance(index, slice):
            return [self[rank] for rank in range(self.world_size)[index]]
        rank = range(self.world_size)[index]  # a negative index, or IndexError, as a list's
        if rank not in self._read:
            self._read[rank] = self._load(rank)
        return self._read[rank]

    @abstractmethod
    def _load(self, rank: int) -> _Part:
        """Read and check rank ``rank``'s file."""


class RankFiles(_LazyRanks[dict[str, Any]]):
    """The saved ranks' entries, index = rank, each file read and checked when its entry is first asked for."""

    bytes_read = 0  # what this process read of the rank files (benchmarks/checkpoint_scale.py)

    @classmethod
    def of(
        cls,
        index: object,
        checkpoint: str | os.PathLike[str] | None = None,
        *,
        folders: Sequence[str | os.PathLike[str]] = (),
    ) -> RankFiles:
        """The rank files an index (``entry["ranks"]``) names, found as :func:`with_rank_files` says."""
        keys = _OLD_INDEX_KEYS if isinstance(index, Mapping) and "loaders" in index else _INDEX_KEYS
        folder, size, save_id, _ = _find_save(index, keys, "ranks", checkpoint, folders)
        return cls(folder, size, save_id)

    def where(self, rank: int) -> str:
        """The path (or URL) of rank ``rank``'s file."""
        return _join(self.folder, _RANK_FILE.format(rank))

    def _load(self, rank: int) -> dict[str, Any]:
        key = f"ranks.{rank}"
        path = self.where(rank)
        raw = _read(path, key, self.save_id)
        self.bytes_read += len(raw)
        try:
            document = json.loads(raw)
        except (ValueError, RecursionError):
            raise ProgressStateError(key, f"{path}: damaged rank file (not JSON)") from None
        if not isinstance(document, dict) or set(document) != _FILE_KEYS:
            raise ProgressStateError(key, f"{path}: damaged rank file (expected keys {sorted(_FILE_KEYS)})")
        found = (document["save_id"], document["rank"], document["world_size"])
        if found != (self.save_id, rank, self.world_size):
            raise ProgressStateError(
                key,
                f"{path}: written for rank {found[1]} of {found[2]} by save {found[0]}, not rank {rank} of "
                f"{self.world_size} by save {self.save_id} (a file from another save?)",
            )
        entry = document["entry"]
        try:
            digest = hashlib.sha256(_canonical(entry)).hexdigest()
        except (TypeError, ValueError):
            digest = ""
        if digest != document["sha256"]:
            raise ProgressStateError(key, f"{path}: damaged rank file (its entry does not match its sha256)")
        if not isinstance(entry, dict):
            raise ProgressStateError(key, f"{path}: expected an entry dict")
        return entry


def _find_save(
    index: object,
    keys: frozenset[str],
    key: str,
    checkpoint: str | os.PathLike[str] | None,
    folders: Sequence[str | os.PathLike[str]],
) -> tuple[str, int, str, Mapping[str, Any]]:
    """``(folder, world_size, save_id, index)`` of the save an index with ``keys`` names, checked (errors name
    ``key``); the folder is the first that exists (docs/distributed.md, "Rank files", gives the order)."""
    if not isinstance(index, Mapping) or set(index) != keys:
        raise ProgressStateError(key, f"expected an index of rank files with keys {sorted(keys)}")
    relative, save_id, written_in = index["rank_files"], index["save_id"], index["written_in"]
    if not isinstance(save_id, str) or not _SAVE_ID.fullmatch(save_id):
        raise ProgressStateError(f"{key}.save_id", "expected 32 hexadecimal digits")
    size = read_int(index["world_size"], f"{key}.world_size", minimum=1)
    if not isinstance(relative, str) or posixpath.isabs(relative) or ".." in relative.split("/"):
        raise ProgressStateError(f"{key}.rank_files", "expected a folder relative to the checkpoint's folder")
    if not relative.endswith("/" + save_id):
        raise ProgressStateError(f"{key}.rank_files", f"does not end in the save id {save_id}")
    if not isinstance(written_in, str) or not written_in.rstrip("/\\").endswith(save_id):
        raise ProgressStateError(f"{key}.written_in", f"expected the folder of save {save_id}")
    candidates = []
    if checkpoint is not None:
        root = _ranks_root(_resolved(os.fspath(checkpoint)))
        candidates += [_join(root, save_id), _join(os.path.dirname(root), relative)]
    candidates += [_join(_resolved(os.fspath(folder)), relative) for folder in folders]
    candidates.append(written_in)
    for folder in candidates:
        filesystem, where = _storage(folder)
        if filesystem.exists(where):
            return folder, size, save_id, index
    raise ProgressStateError(
        key,
        f"the rank files of save {save_id} ({relative}, beside the checkpoint) are not found; looked in "
        + ", ".join(dict.fromkeys(candidates))
        + ": keep the checkpoint's '.ranks' folder with it",
    )


def write_rank_tensors(
    ranks: Sequence[object], checkpoint: str | os.PathLike[str], save_id: str, name: str
) -> dict[str, Any]:
    """``torch.save`` each rank's part (tensors, e.g. partial gradients) to ``<checkpoint>.ranks/<save_id>/<name>-<r>.pt``
    (the folder of :func:`write_rank_files`' save ``save_id``); return the index to keep in the checkpoint instead."""
    index = _new_save(checkpoint, save_id, len(ranks))
    for rank, part in enumerate(ranks):
        buffer = io.BytesIO()
        torch.save(part, buffer)
        _write(_join(index["written_in"], f"{name}-{rank}.pt"), buffer.getvalue())
    return {**index, "name": name}


class RankTensors(_LazyRanks[Any]):
    """Each saved rank's tensors (:func:`write_rank_tensors`), index = rank, read (``torch.load(weights_only=True)``)
    when first asked for; a missing or damaged file is a ``ProgressStateError`` naming ``<key>.<r>``."""

    def __init__(self, folder: str, world_size: int, save_id: str, name: str, key: str) -> None:
        super().__init__(folder, world_size, save_id)
        self.name = name
        self.key = key

    @classmethod
    def of(cls, index: object, checkpoint: str | os.PathLike[str] | None, *, key: str) -> RankTensors:
        """The files an index of :func:`write_rank_tensors` names, found as :func:`with_rank_files` says."""
        folder, size, save_id, fields = _find_save(index, _TENSOR_INDEX_KEYS, key, checkpoint, ())
        name = fields["name"]
        if not isinstance(name, str) or not re.fullmatch(r"[a-z_]+", name):
            raise ProgressStateError(f"{key}.name", "expected a lowercase name")
        return cls(folder, size, save_id, name, key)

    def _load(self, rank: int) -> Any:
        path = _join(self.folder, f"{self.name}-{rank}.pt")
        raw = _read(path, f"{self.key}.{rank}", self.save_id)
        try:
            return torch.load(io.BytesIO(raw), map_location="cpu", weights_only=True)
        except Exception as error:  # untrusted bytes: whatever torch.load raises is the file's fault
            first_line = (str(error).splitlines() or [type(error).__name__])[0][:200]
            raise ProgressStateError(f"{self.key}.{rank}", f"{path}: damaged ({first_line})") from None


# storage: fsspec's filesystems (installed with torch), its local one for a local path ---------------------------
def _is_url(path: str) -> bool:
    return _URL.match(path) is not None and not path.startswith("file://")


def _storage(path: str) -> tuple[Any, str]:
    """The filesystem holding ``path``, and the path on it."""
    fsspec: Any = importlib.import_module("fsspec")  # untyped
    if not _is_url(path):
        return fsspec.filesystem("file"), path
    filesystem, where = fsspec.core.url_to_fs(path)
    return filesystem, str(where)


def _resolved(path: str) -> str:
    """A local path with its links resolved (Lightning's ``save_last="link"`` links ``last.ckpt``)."""
    path = path.removeprefix("file://")
    return path if _is_url(path) else os.path.realpath(path)


def _ranks_root(checkpoint: str) -> str:
    """``<checkpoint>.ranks``: a URL, or an absolute local path (also for a ``file://`` URL)."""
    checkpoint = checkpoint.removeprefix("file://")
    return (checkpoint.rstrip("/") if _is_url(checkpoint) else os.path.abspath(checkpoint)) + ".ranks"


def _join(folder: str, relative: str) -> str:
    return posixpath.join(folder, relative) if _is_url(folder) else os.path.join(folder, *relative.split("/"))


def _write(path: str, data: bytes) -> None:
    """Write ``data`` at ``path``: a local file through a temporary one and ``os.replace``."""
    filesystem, where = _storage(path)
    if _is_url(path):
        filesystem.pipe_file(where, data)
        return
    filesystem.pipe_file(where + ".tmp", data)
    os.replace(where + ".tmp", where)


def _read(path: str, key: str, save_id: str) -> bytes:
    try:
        filesystem, where = _storage(path)
        if not filesystem.isfile(where):
            raise ProgressStateError(
                key,
                f"{path}: missing (the rank files of save {save_id} belong beside the checkpoint, in its "
                "'.ranks' folder: move or copy that folder with the checkpoint)",
            )
        if filesystem.size(where) > _MAX_FILE_BYTES:
            raise ProgressStateError(key, f"{path}: larger than {_MAX_FILE_BYTES} bytes; not read")
        data: bytes = filesystem.cat_file(where)
        return data
    except ProgressStateError:
        raise
    except Exception as error:  # whatever the storage raises: the file cannot be read
        raise ProgressStateError(key, f"{path}: cannot be read ({type(error).__name__}: {error})") from None
