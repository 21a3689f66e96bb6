"""Checkpoints at fsspec URLs (``memory://``, ``s3://``, ...), copied into a temporary folder to be read there
(docs/cli.md, "Checkpoints at URLs")."""

from __future__ import annotations

import contextlib
import importlib
import os
import posixpath
import re
import tempfile
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, TypeGuard

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
_TIME_KEYS = ("mtime", "LastModified", "last_modified", "updated", "created")


class UrlProblem(ValueError):
    """A URL cannot be used; the message names it."""


def is_url(path: object) -> TypeGuard[str]:
    """Whether ``path`` is a string with a ``protocol://`` prefix."""
    return isinstance(path, str) and _URL.match(path) is not None


def local_path(url: str) -> Path | None:
    """The local path of a ``file://`` URL, else None."""
    filesystem, path = _filesystem(url)
    protocols = filesystem.protocol  # a str or a tuple of them
    return Path(path) if "file" in ((protocols,) if isinstance(protocols, str) else protocols) else None


@contextlib.contextmanager
def fetched(url: str, errors: type[Exception]) -> Iterator[Path]:
    """A temporary local copy of the checkpoint file or folder at ``url`` (gone after the block); an ``errors``
    raised in the block names the URL in place of the copy."""
    filesystem, path = _filesystem(url)
    with tempfile.TemporaryDirectory(prefix="progress-tracker-") as folder:
        local = Path(folder) / (posixpath.basename(path.rstrip("/")) or "checkpoint")
        try:
            if not filesystem.exists(path):
                raise UrlProblem(f"{url}: no such file or folder")
            if filesystem.isdir(path):
                filesystem.get(path.rstrip("/") + "/", str(local), recursive=True)
            else:
                filesystem.get_file(path, str(local))
        except UrlProblem:
            raise
        except Exception as error:  # whatever the storage raises: the URL cannot be read
            raise UrlProblem(f"{url}: cannot be read ({type(error).__name__}: {error})") from None
        try:
            yield local
        except errors as error:
            raise errors(str(error).replace(str(local), url)) from None


def candidates(url: str, folder_kind: Callable[[Iterable[str]], str | None], suffixes: tuple[str, ...]) -> list[str]:
    """The URL itself if it is a file or a checkpoint folder, else the checkpoint files (by suffix) and checkpoint
    folders anywhere under it, as URLs that start with ``url``."""
    filesystem, root = _filesystem(url)

    def is_checkpoint_folder(path: str) -> bool:
        names = [posixpath.basename(str(child).rstrip("/")) for child in filesystem.ls(path, detail=False)]
        return folder_kind(names) is not None

    try:
        if not filesystem.isdir(root) or is_checkpoint_folder(root):
            return [url]
        found = scan(filesystem.walk(root), is_checkpoint_folder, suffixes, posixpath.join)
    except Exception as error:  # whatever the storage raises: the URL cannot be listed
        raise UrlProblem(f"{url}: cannot be listed ({type(error).__name__}: {error})") from None
    base = url.rstrip("/")
    return [base + "/" + posixpath.relpath(path, root) for path in found]


def scan(
    walk: Iterable[tuple[str, list[str], list[str]]],
    is_checkpoint_folder: Callable[[str], bool],
    suffixes: tuple[str, ...],
    join: Callable[[str, str], str],
) -> list[str]:
    """Checkpoint files (by suffix) and checkpoint folders in ``walk`` (``os.walk``'s form, local or fsspec's);
    a checkpoint folder's own files are not candidates."""
    found: list[str] = []
    for folder, subfolders, files in walk:
        inside = [name for name in subfolders if is_checkpoint_folder(join(folder, name))]
        found.extend(join(folder, name) for name in inside)
        subfolders[:] = sorted(name for name in subfolders if name not in inside)
        found.extend(join(folder, name) for name in files if name.endswith(suffixes))
    return found


def modified(url: str) -> int:
    """Modification time in ns of the file at ``url`` (of the newest file inside, for a folder); 0 if unknown."""
    try:
        filesystem, path = _filesystem(url)
        files = filesystem.find(path) if filesystem.isdir(path) else [path]
        return max((_modified(filesystem, file) for file in files), default=0)
    except Exception:  # unknown: the name decides
        return 0


def _modified(filesystem: Any, path: str) -> int:
    try:
        value: Any = filesystem.modified(path)
    except Exception:  # not every filesystem implements modified(): look in info()
        info = filesystem.info(path)
        value = next((info[key] for key in _TIME_KEYS if info.get(key) is not None), 0)
    if isinstance(value, datetime):
        return int(value.timestamp() * 1e9)
    if isinstance(value, str):
        return int(datetime.fromisoformat(value).timestamp() * 1e9)
    return int(float(value) * 1e9)


def _filesystem(url: str) -> tuple[Any, str]:
    try:
        fsspec: Any = importlib.import_module("fsspec")  # untyped
    except ImportError:
        raise UrlProblem(f"{url}: reading a URL needs fsspec (pip install fsspec)") from None
    try:
        filesystem, path = fsspec.core.url_to_fs(url)
    except Exception as error:  # an unknown protocol, or one whose package is missing
        raise UrlProblem(f"{url}: {type(error).__name__}: {error}") from None
    return filesystem, os.fspath(path)
