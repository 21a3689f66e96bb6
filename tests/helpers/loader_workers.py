"""Ending a StatefulDataLoader's worker processes after a fit a test stopped with an exception (a simulated kill)."""

from __future__ import annotations

from torchdata.stateful_dataloader import StatefulDataLoader


def end_workers(*loaders: object) -> None:
    """Drop each StatefulDataLoader's iterator, ending its workers as the killed process would. Lightning's teardown
    ends only torch's own multi-process iterator: a StatefulDataLoader's stays, in the Trainer's reference cycles,
    until a garbage collection, which then waits 5 s on each worker (it finalizes the worker queues first, so the
    workers never hear the shutdown)."""
    for loader in loaders:
        if isinstance(loader, StatefulDataLoader):
            loader.load_state_dict({})  # public: forgets the iterator (and the state the run leaves behind)
