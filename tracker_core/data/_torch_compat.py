"""Every private attribute of torch's data loading that data position touches (``ATTRIBUTES``; none of torchdata's),
checked at import: a missing one raises ``ImportError`` naming the installed version."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import _BaseDataLoaderIter

# Owner -> the private class attributes used here, checked at import.
ATTRIBUTES: dict[type, tuple[str, ...]] = {DataLoader: ("_get_iterator",)}
# Owner -> the private attributes its instances get in __init__, checked on real instances by
# tests/test_compat_instances.py.
INSTANCE_ATTRIBUTES: dict[type, tuple[str, ...]] = {DataLoader: ("_iterator",), _BaseDataLoaderIter: ("_sampler_iter",)}


def check_attributes(package: str, version: str, owners: Mapping[Any, tuple[str, ...]]) -> None:
    """Raise ``ImportError`` naming ``package version`` if an attribute of ``owners`` (classes, modules) is gone."""
    missing = [
        f"{owner.__name__}.{name}" for owner, names in owners.items() for name in names if not hasattr(owner, name)
    ]
    if missing:
        raise ImportError(
            f"tracker-core's data position relies on {', '.join(missing)}, which {package} {version} "
            "does not have: install a version in the range tracker-core declares"
        )


# --- the loader's iterator -------------------------------------------------------------------


def iterator_hook(loader: DataLoader[Any]) -> Any:
    """The ``_get_iterator`` set on this loader instance (not its class), or None."""
    return loader.__dict__.get("_get_iterator")


def install_iterator_hook(loader: DataLoader[Any], hook: Callable[[], Any]) -> None:
    """Make ``iter(loader)`` build its iterators through ``hook`` (an instance-level ``_get_iterator``)."""
    loader._get_iterator = hook  # type: ignore[method-assign]


def build_iterator(loader: DataLoader[Any]) -> Any:
    """An iterator built as the loader's class builds one."""
    return type(loader)._get_iterator(loader)


def live_iterator(loader: DataLoader[Any]) -> Any:
    """The iterator a loader keeps (persistent workers, or one ``StatefulDataLoader.state_dict()`` built), or None."""
    return loader._iterator


def sampler_indices(iterator: Any) -> Any:
    """The index iterator a DataLoader iterator draws from (``_sampler_iter``), or None."""
    return getattr(iterator, "_sampler_iter", None)


check_attributes("torch", torch.__version__, ATTRIBUTES)
