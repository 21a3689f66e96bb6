"""Each rank's progress entry in its own file beside an Ignite checkpoint (docs/distributed.md "Rank files").

With several processes the ``ProgressHandler``'s entry on the writer holds every rank's entry. At each
``STARTED`` of an attached engine, the ``DiskSaver`` of every ``Checkpoint`` registered on the attached
engines whose ``to_save`` holds the handler is replaced by a :class:`RankFilesSaver` with its settings: on
the rank that writes, it puts each rank's entry in ``<checkpoint>.ranks/<save_id>/rank-<r>.json`` and keeps
rank 0's entry and the index in the checkpoint (``tracker_core.adapter.write_rank_files``); removing a
checkpoint (``n_saved``) removes its rank files. A ``Checkpoint`` called by hand, saving elsewhere than to
a plain ``DiskSaver``, or writing on another rank than the gather's writer (rank 0) keeps every entry in
its file, as before.

``Checkpoint.load_objects`` never tells the handler which file it loads: the rank files are looked for
beside the file named by ``ProgressHandler.loading_from(path)`` if given, under the folders of the
``Checkpoint``s saving the handler, then where they were written (``written_in``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import ignite.distributed as idist
from ignite.engine import Engine
from ignite.handlers import Checkpoint, DiskSaver

from tracker_core.adapter import remove_other_saves, write_rank_files
from tracker_core.integrations._checkpoint_files import IGNITE_STATE_KEYS
from tracker_core.integrations.ignite._compat import checkpoint_dirnames, registered_handlers


class RankFilesSaver(DiskSaver):
    """The ``DiskSaver`` it replaces, writing each rank's progress entry to its own file beside the checkpoint."""

    def __init__(self, inner: DiskSaver) -> None:  # DiskSaver.__init__ would check the folder again
        self.__dict__.update(inner.__dict__)
        self.inner = inner

    def __call__(self, checkpoint: Mapping[str, Any], filename: str, metadata: Mapping[str, Any] | None = None) -> None:
        path = os.path.join(self.dirname, filename)
        split, save_ids = _split(checkpoint, path) if idist.get_rank() == self.save_on_rank else (checkpoint, [])
        self.inner(split, filename, metadata)
        if idist.get_rank() == self.save_on_rank:
            remove_other_saves(path, save_ids)  # a checkpoint written over no longer uses the older ones

    def remove(self, filename: str) -> None:
        self.inner.remove(filename)
        if idist.get_rank() == self.save_on_rank:
            remove_other_saves(os.path.join(self.dirname, filename), None)


def wrap_savers(engine: Engine, engines: Sequence[Engine], handler: object) -> None:
    """Give every ``Checkpoint(..., DiskSaver(...))`` on ``engines`` saving ``handler`` a :class:`RankFilesSaver`."""
    for other in engines:
        for _, registered, _ in registered_handlers(other):
            if (
                isinstance(registered, Checkpoint)
                and type(registered.save_handler) is DiskSaver
                and any(saved is handler for saved in registered.to_save.values())
            ):
                registered.save_handler = RankFilesSaver(registered.save_handler)


def checkpoint_folders(engines: Sequence[Engine], handler: object) -> list[str]:
    """The folders of the ``Checkpoint``s on ``engines`` saving ``handler``: where a checkpoint it loads may be."""
    found: list[str] = []
    for engine in engines:
        found += [folder for folder in checkpoint_dirnames(engine, holding=handler) if folder not in found]
    return found


def _split(checkpoint: Mapping[str, Any], path: str) -> tuple[Mapping[str, Any], list[str]]:
    """``checkpoint`` with each ProgressHandler state's gathered entry split into rank files, and their save ids."""
    if _is_state(checkpoint):  # Checkpoint saved the handler alone: its state is the whole file
        state, save_id = _split_state(checkpoint, path)
        return state, [save_id] if save_id else []
    split, save_ids = dict(checkpoint), []
    for key, value in checkpoint.items():
        if _is_state(value):
            split[key], save_id = _split_state(value, path)
            save_ids += [save_id] if save_id else []
    return split, save_ids


def _split_state(state: Mapping[str, Any], path: str) -> tuple[dict[str, Any], str | None]:
    entry = state["progress_tracker"]
    ranks = entry.get("ranks") if isinstance(entry, dict) else None
    if not isinstance(ranks, list) or len(ranks) < 2:
        return dict(state), None
    index = write_rank_files(entry, path)
    return {**state, "progress_tracker": index}, index["ranks"]["save_id"]


def _is_state(value: object) -> bool:
    return isinstance(value, Mapping) and set(value) == set(IGNITE_STATE_KEYS)
