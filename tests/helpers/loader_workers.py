"""Ending loader worker processes a test leaves behind, now rather than at a later test's garbage collection.

A multi-process loader iterator left in reference cycles is ended by a garbage collection, which waits 5 s on each
worker: it finalizes the worker queues first, so the workers never hear the shutdown. Dropped by its last reference
instead, it ends its workers at once.
"""

from __future__ import annotations

from typing import Any

from torchdata.stateful_dataloader import StatefulDataLoader


def end_workers(*loaders: object) -> None:
    """Drop each StatefulDataLoader's iterator (persistent workers keep theirs on the loader between epochs)."""
    for loader in loaders:
        if isinstance(loader, StatefulDataLoader):
            loader.load_state_dict({})  # public: forgets the iterator (and the state the run leaves behind)


def end_stopped_fit(trainer: Any) -> None:
    """Tear down the fit loop of a fit a test stopped with an exception (a simulated kill). Lightning tears down only
    the loop it deems active, the validation loop when the exception came from a validation inside the fit, so the
    train iterators stay in the Trainer's reference cycles."""
    trainer.fit_loop.teardown()
