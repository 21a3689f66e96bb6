"""How many samples a batch holds: one rule for every adapter."""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor


def samples_in(batch: object) -> int:
    """The first dimension of the first tensor in ``batch``, searched depth first through
    lists, tuples and mapping values (a 0-d tensor counts 1). A batch without tensors counts
    its items if it is a list or tuple (e.g. strings), else 0."""
    # The common cases first, by exact type: isinstance against Tensor runs a Python-level
    # metaclass check, which would cost more than the rest of a batch's progress marks.
    kind = type(batch)
    if kind is tuple or kind is list:
        if batch:
            first = batch[0]  # type: ignore[index]
            if type(first) is Tensor:
                shape = first.shape
                return shape[0] if shape else 1
    elif kind is Tensor:
        shape = batch.shape  # type: ignore[attr-defined]  # exact type checked above; cast() would cost a call
        return shape[0] if shape else 1
    size = _first_tensor_size(batch)
    if size is not None:
        return size
    return len(batch) if isinstance(batch, (list, tuple)) else 0


def _first_tensor_size(batch: object) -> int | None:
    if isinstance(batch, Tensor):
        return batch.shape[0] if batch.dim() else 1
    if isinstance(batch, Mapping):
        batch = batch.values()
    elif not isinstance(batch, (list, tuple)):
        return None
    for item in batch:
        size = _first_tensor_size(item)
        if size is not None:
            return size
    return None


def batches_in(loader: object) -> int | None:
    """Batches ``loader`` yields per epoch: its ``len()``, or None when it has none (iterable data)."""
    try:
        return len(loader)  # type: ignore[arg-type]
    except TypeError:
        return None
