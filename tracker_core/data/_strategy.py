"""What every resume mechanism of a loader kind provides to ``LoaderPosition`` (the front)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

from tracker_core.data._epoch import EpochRecord, Replay, Site

LoaderKind = Literal["own_state", "plain"]


def is_stateful(obj: object) -> bool:
    """Whether ``obj`` carries its own position: torchdata's ``Stateful`` protocol (``state_dict`` and
    ``load_state_dict``), which Hugging Face ``datasets.IterableDataset`` follows too."""
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


class Strategy:
    """One loader kind's way to note an epoch as it begins and to replay it from a batch."""

    kind: ClassVar[LoaderKind]
    epoch_keys: ClassVar[tuple[str, ...]] = ("iterator_rng", "loader_generator")
    optional_epoch_keys: ClassVar[tuple[str, ...]] = ()
    order_depends_on_workers: ClassVar[bool] = True  # a resume with another worker count is refused

    def __init__(self, site: Site) -> None:
        self.site = site

    def begin(self) -> Any:
        """Build a new epoch's iterator (``cursor.epoch`` holds its new record)."""
        return self.site.build()

    def replay(self, replay: Replay) -> Any:
        """Build the iterator of the armed epoch, positioned at ``replay.skip`` (the global RNGs are saved around it,
        the epoch's iterator RNGs applied)."""
        raise NotImplementedError

    def epoch_to_plain(self, record: EpochRecord) -> dict[str, Any]:
        """The kind's fields of the saved epoch record."""
        return {}

    def read_epoch(self, fields: Mapping[str, Any], key: str, record: EpochRecord) -> None:
        """Validate the kind's saved fields into ``record``."""

    def saved_record(self, record: EpochRecord | None, batches_consumed: int) -> EpochRecord | None:
        """The record a checkpoint saves of the most recently begun epoch, ``record`` (None: none began)."""
        return record

    def order_drawn_again(self, record: EpochRecord | None) -> bool:
        """Whether a resume inside the epoch of ``record`` draws its order again instead of continuing it (inexact)."""
        return False

    def arm(self) -> None:
        """Prepare the loader for its next epoch after a load."""
