"""Every private attribute of Ignite the adapter touches, in one place, checked when imported."""

from __future__ import annotations

import ignite
from ignite.engine import Engine

from tracker_core.integrations._extra import check_attributes


def set_batches_into_epoch(engine: Engine, batches: int) -> None:
    """Make Ignite's next epoch iteration start at its batch ``batches``: no public way says it (docs/design.md)."""
    engine._init_iter = batches


check_attributes("pytorch-ignite", ignite.__version__, {"Engine": (Engine, ("_init_iter",))})
