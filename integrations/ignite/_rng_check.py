"""Naming user code that moves the global RNGs between a checkpoint load and the first resumed batch.

The core restores the global RNGs at ``Checkpoint.load_objects``. In the uninterrupted run
nothing draws between the checkpoint and the next batch of the same epoch, so the resumed
run must reach its first batch with the RNGs exactly as loaded; a ``torch.manual_seed``
after loading (Ignite's own save/resume example has one) or a draw in a ``STARTED`` /
``EPOCH_STARTED`` handler makes every later dropout and augmentation draw differ while the
progress states still compare equal. One ``InexactResumeWarning`` names the cause.
"""

from __future__ import annotations

import warnings
from typing import Any

from ignite.engine import Engine, Events

from tracker_core import InexactResumeWarning
from tracker_core.adapter import GlobalRng
from tracker_core.integrations.ignite._compat import prepend_handler


class RngCheck:
    """Compares the global RNGs with the loaded ones at the trainer's STARTED and before its first resumed batch."""

    def __init__(self) -> None:
        self._loaded: dict[str, Any] | None = None

    def loaded(self) -> None:
        """A checkpoint was just loaded: remember the RNG states the core restored."""
        self._loaded = GlobalRng.capture().to_plain()

    def started(self) -> None:
        """The trainer's STARTED after the load, before anything of the resumed run draws."""
        loaded = self._loaded
        if loaded is not None and _moved(loaded, "between Checkpoint.load_objects and the trainer's run()"):
            self._loaded = None

    def first_batch_continues_the_epoch(self, engine: Engine, continues: bool) -> None:
        """Check again at the first batch if it continues the saved epoch (``continues``).

        A resume at an epoch boundary draws legitimately before its first batch (the next
        epoch's sampler, as the uninterrupted run did): it is checked at STARTED only.
        """
        if not continues or self._loaded is None:
            self._loaded = None
            return

        def first_batch() -> None:
            engine.remove_event_handler(first_batch, Events.GET_BATCH_STARTED)
            loaded, self._loaded = self._loaded, None
            if loaded is not None:
                _moved(loaded, "in a STARTED or EPOCH_STARTED handler of the resumed run")

        # Before the batch is fetched: fetching it may draw (a sampler that starts lazily) in both runs.
        prepend_handler(engine, Events.GET_BATCH_STARTED, first_batch)


def _moved(loaded: dict[str, Any], where: str) -> bool:
    if GlobalRng.capture().to_plain() == loaded:
        return False
    warnings.warn(
        f"the global RNG state changed {where} (e.g. torch.manual_seed): the checkpoint restored it, "
        "and the resumed run's dropout, augmentation and other random draws now differ from the "
        "uninterrupted run. Seed before Checkpoint.load_objects, not after",
        InexactResumeWarning,
        stacklevel=2,
    )
    return True
