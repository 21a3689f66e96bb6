"""Reading a checkpoint file, for ``read_checkpoint`` and Accelerate's progress files: the checks before it is loaded
(a regular file, a whole zip) and ``torch.load(weights_only=True)``, which never runs pickled code."""

from __future__ import annotations

import os
import pickle
import re
import stat
import zipfile
from collections.abc import Callable
from typing import Any

import torch

CHUNK = 1 << 20  # bytes read at a time


def kind_problem(mode: int) -> str | None:
    """Why a file of ``st_mode`` ``mode`` is not read as a checkpoint file (a folder, a FIFO), or None."""
    if stat.S_ISDIR(mode):
        return "a folder where a checkpoint file belongs"
    if not stat.S_ISREG(mode):
        return "not a regular file (a FIFO, socket or device); not read"
    return None


def zip_problem(path: str | os.PathLike[str], *, torch_save: bool) -> str | None:
    """Why the zip at ``path`` is damaged, or None: every member is read, which checks its CRC-32. ``torch_save``: it
    must be a zip as torch.save writes it (no member twice, none compressed); else a non-zip file passes unchecked."""
    if torch_save and not zipfile.is_zipfile(path):
        return "truncated or not a torch checkpoint (no zip central directory, which torch.save writes last)"
    try:
        if not torch_save:
            with open(path, "rb") as stream:
                if stream.read(4) != b"PK\x03\x04":  # how a zip archive (torch.save's format) begins
                    return None
        with zipfile.ZipFile(path) as archive:
            seen: set[str] = set()
            for info in archive.infolist():
                if torch_save and info.filename in seen:
                    return f"damaged: the zip member {info.filename!r} appears twice"
                seen.add(info.filename)
                if torch_save and info.compress_type != zipfile.ZIP_STORED:
                    return f"not a torch checkpoint: the zip member {info.filename!r} is compressed"
                with archive.open(info) as member:
                    while member.read(CHUNK):
                        pass
    except zipfile.BadZipFile as error:
        if "CRC" in str(error):
            return f"damaged: {error} (its bytes changed after it was written)"
        return f"truncated or damaged zip ({error})"
    except Exception as error:  # untrusted bytes: OS, struct, zlib, EOF and value errors all mean damage
        return f"truncated or damaged zip ({type(error).__name__}: {error})"
    return None


def load(path: str | os.PathLike[str], error: Callable[[str], Exception], mmap: bool | None = None) -> Any:
    """``torch.load(path, weights_only=True)`` onto the CPU (``mmap``: as torch.load's); if it fails, raises
    ``error("<path>: <why>")``."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as failure:
        reason = re.search(r"WeightsUnpickler error:\s*(\S[^\n]*)", str(failure))
        raise error(
            f"{path}: refused by torch.load(weights_only=True), which never runs pickled code"
            + (f" ({reason[1].strip()})" if reason else "")
        ) from None
    except Exception as failure:  # untrusted bytes: whatever torch.load raises on them is the file's fault
        first_line = (str(failure).splitlines() or [type(failure).__name__])[0][:300]
        raise error(f"{path}: truncated or not a torch checkpoint ({first_line})") from None
