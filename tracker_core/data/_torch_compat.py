"""The one private attribute of torch's data loading that data position reads (none of torchdata's): checked on real
instances by tests/test_compat_instances.py."""

from __future__ import annotations

from typing import Any

from torch.utils.data import DataLoader

# Owner -> the private attributes its instances get in __init__.
INSTANCE_ATTRIBUTES: dict[type, tuple[str, ...]] = {DataLoader: ("_iterator",)}


def live_iterator(loader: DataLoader[Any]) -> Any:
    """The iterator a loader keeps (persistent workers, or one ``StatefulDataLoader.state_dict()`` built), or None."""
    return loader._iterator
