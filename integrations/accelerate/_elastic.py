"""Loading an Accelerate checkpoint on another number of processes (docs/accelerate.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tracker_core import ProgressStateError
from tracker_core.integrations.accelerate._compat import torch_loader


def check_supported(accelerator: Any, saved_world_size: int) -> None:
    """Raise ``ProgressStateError`` (key ``world_size``) unless Accelerate shards every train loader by
    whole batches over one seedable order, the geometry the core maps (``tracker_core/distributed/_sharded.py``)."""
    needs = []
    if not accelerator.use_seedable_sampler:
        needs.append("DataLoaderConfiguration(use_seedable_sampler=True) (one order per epoch at any world size)")
    if accelerator.split_batches:
        needs.append("split_batches=False")
    if accelerator.dispatch_batches:
        needs.append("dispatch_batches off (no DataLoaderDispatcher)")
    if accelerator.use_stateful_dataloader:
        needs.append("use_stateful_dataloader=False")
    if needs:
        raise ProgressStateError(
            "world_size",
            f"saved by {saved_world_size} processes, loading on {accelerator.num_processes}: an elastic resume "
            f"through Accelerate needs {'; '.join(needs)}. Nothing was loaded",
        )


def mapped_passes(mapping: Mapping[str, Any] | None, loaders: Mapping[int, Any]) -> tuple[int | None, dict[int, bool]]:
    """The re-entered train passes after an elastic load (``view.resume_mapping``; ``loaders``: index -> loader):
    the ``accelerator.step`` to set (None: Accelerate's restore stands) and, by index, whether a pass is over."""
    if mapping is None or not mapping["train_loaders"]:
        return None, {}
    finished = {}
    step = 0  # a finished pass ended its dataloader, which reset Accelerate's counter
    for record in mapping["train_loaders"]:
        loader = loaders[record["index"]]
        finished[record["index"]] = record["batches_consumed"] == len(torch_loader(loader))
        if not finished[record["index"]]:
            step = record["batches_consumed"]
    return step, finished
