"""Registering the trainer's data with the core, without ever failing inside a handler."""

from __future__ import annotations

import warnings
from typing import Any, TypeGuard

from torch.utils.data import DataLoader

from tracker_core import InexactResumeWarning, ProgressStateError, Tracker
from tracker_core.adapter import batches_in
from tracker_core.integrations.ignite._round_robin import RoundRobin


class Loaders:
    """Hands the trainer's data to ``Tracker.track_train_loader`` at STARTED and each EPOCH_STARTED; a loader the
    core cannot position is left untracked with one ``InexactResumeWarning`` (docs/ignite.md)."""

    def __init__(self, tracker: Tracker) -> None:
        self._tracker = tracker
        self._refused: dict[int, object] = {}  # id -> the loader (kept, so the id stays its own)
        self.round_robin: RoundRobin | None = None  # the trainer's data, when it is a RoundRobin
        self.tracked_id = 0  # id() of the data tracked last: set_data() inside an epoch hands over other data

    def track(self, data: object) -> None:
        """Register the trainer's data: a loader as train dataloader 0, a RoundRobin's loaders as 0, 1, ..."""
        self.round_robin = data if isinstance(data, RoundRobin) else None
        self.tracked_id = id(data)
        for index, loader in enumerate(loaders_in(data)):
            if loader is None or id(loader) in self._refused:
                continue
            try:
                self._tracker.track_train_loader(loader, index)
            except ProgressStateError:
                raise
            except (AttributeError, TypeError, ValueError) as error:
                self._refused[id(loader)] = loader
                warnings.warn(
                    f"the trainer's data ({type(loader).__name__}) cannot be tracked ({error}); it is left "
                    "untracked: a mid-epoch checkpoint resumes its epoch from the first batch",
                    InexactResumeWarning,
                    stacklevel=2,
                )


def loaders_in(data: object) -> tuple[object, ...]:
    """The trainer's loaders: a RoundRobin's, or ``data`` itself."""
    return data.loaders if isinstance(data, RoundRobin) else (data,)


def has_own_state(loader: object) -> TypeGuard[DataLoader[Any]]:
    """A torch DataLoader with a state of its own (torchdata's StatefulDataLoader): positioned by it on a resume.
    The core's own test (``Stateful``: ``state_dict`` and ``load_state_dict``) is not public: the same one here."""
    return isinstance(loader, DataLoader) and all(
        callable(getattr(loader, name, None)) for name in ("state_dict", "load_state_dict")
    )


def any_own_state(data: object) -> bool:
    return any(has_own_state(loader) for loader in loaders_in(data))


def has_plain_loader(data: object) -> bool:
    """A loader of ``data`` is a torch DataLoader without a state of its own: nothing positions it, so a resumed
    epoch's fresh iterator reads it whole, drawing the global RNG as any new epoch does."""
    return any(isinstance(loader, DataLoader) and not has_own_state(loader) for loader in loaders_in(data))


def finish_replay(data: object, epoch_length: int) -> None:
    """Read the loaded epoch's empty replay now: left for Ignite's next ``iter()``, it would leave a
    ``DistributedSampler`` at the saved epoch (undoing the next epoch's ``set_epoch``)."""
    if batches_in(data) == epoch_length:
        for loader in filter(has_own_state, loaders_in(data)):
            next(iter(loader), None)
