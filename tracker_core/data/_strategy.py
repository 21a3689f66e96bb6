"""What every resume mechanism of a loader kind provides to ``LoaderPosition`` (the front)."""

from __future__ import annotations

from typing import ClassVar, Literal

from tracker_core.data._epoch import Site

LoaderKind = Literal["own_state", "plain"]


def is_stateful(obj: object) -> bool:
    """Whether ``obj`` carries its own position: torchdata's ``Stateful`` protocol (``state_dict`` and
    ``load_state_dict``), which Hugging Face ``datasets.IterableDataset`` follows too."""
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


class Strategy:
    """What a loader kind's saved state holds (a loader with its own state also notes an epoch as it begins and
    replays it from a batch: ``OwnState``)."""

    kind: ClassVar[LoaderKind]
    epoch_keys: ClassVar[tuple[str, ...]] = ("iterator_rng", "loader_generator")
    optional_epoch_keys: ClassVar[tuple[str, ...]] = ()
    order_depends_on_workers: ClassVar[bool] = True  # a resume with another worker count is refused

    def __init__(self, site: Site) -> None:
        self.site = site

    def arm(self) -> None:
        """Prepare the loader for its next epoch after a load."""
