"""A plain torch ``DataLoader`` (no state of its own) is left as it is: nothing is installed on it. Its generators are
saved, so a resume between epochs draws the next epoch as the uninterrupted run does; inside an epoch the framework's
own rule applies (Lightning and Ignite read the epoch from its start, Accelerate's loop reads it whole), warned at the
save and at the resume, naming torchdata's ``StatefulDataLoader``, which resumes at its batch (docs/resume.md)."""

from __future__ import annotations

import warnings
from typing import Any

from tracker_core._errors import InexactResumeWarning
from tracker_core.data._fast_forward import describe

_OPT_IN = (
    "use torchdata's StatefulDataLoader (a drop-in DataLoader with a state of its own) to resume at the batch, "
    "or checkpoint between epochs"
)


def warn_plain_mid_epoch(loader: Any, doing: str, batches: int) -> None:
    """A plain loader saved, or resumed, inside an epoch: the framework reads the epoch from its start."""
    at = f"after {batches} batches of an epoch" if batches else "in an epoch whose iterator may already be built"
    warnings.warn(
        f"{doing} {describe(loader)} {at}: a plain DataLoader has no position of its own, so the resumed epoch is "
        f"read by the framework's own rule (from its first batch, with another order), not from this batch; {_OPT_IN}",
        InexactResumeWarning,
        stacklevel=4,
    )


def warn_persistent_workers(loader: Any, doing: str) -> None:
    """Started persistent workers keep their seeds and iterator across epochs; a resumed process starts new ones (a
    plain loader: at every save; one with its own state: at a save between epochs, and at its resume)."""
    warnings.warn(
        f"{doing} {describe(loader)} with persistent workers started: they keep their seeds and their iterator "
        "across epochs, and a resumed process starts new ones, which draw the next epoch's order and the workers' "
        "seeds again (without persistent workers, a resume between epochs is exact)",
        InexactResumeWarning,
        stacklevel=3,
    )
