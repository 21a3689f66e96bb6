"""Hugging Face Accelerate adapter: ``AcceleratorProgress`` and its ``Fit`` drive the loops (docs/accelerate.md)."""

from tracker_core.integrations._extra import require

require("accelerate", "accelerate")

from tracker_core.integrations.accelerate._fit import Fit  # noqa: E402
from tracker_core.integrations.accelerate._progress import AcceleratorProgress  # noqa: E402

__all__ = ["AcceleratorProgress", "Fit"]
