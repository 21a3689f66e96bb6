"""Every private attribute of Ignite the adapter touches, in one place (docs/design.md)."""

from __future__ import annotations

from ignite.engine import Engine


def set_batches_into_epoch(engine: Engine, batches: int) -> None:
    """Make Ignite's next epoch iteration start at its batch ``batches``: no public way says it (docs/design.md)."""
    engine._init_iter = batches


# The private attributes instances get in __init__, by class: checked on real instances by tests/test_compat_instances.py
# (Ignite's one is an instance attribute: nothing to check at import).
INSTANCE_ATTRIBUTES = {"Engine": ("_init_iter",)}
