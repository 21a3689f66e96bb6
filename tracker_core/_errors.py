"""The error types of tracker-core."""

from __future__ import annotations


class ProgressStateError(ValueError):
    """A progress state is malformed, truncated, inconsistent or from a newer schema; raised before anything is
    changed. ``key`` is the dotted path of the offending entry (``""`` for the whole state), named in the message."""

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        super().__init__(f"progress state {key or '<root>'!r}: {problem}")


class EventOrderError(RuntimeError):
    """An event phase was marked out of order (e.g. a batch completed before it was processed): the driving loop
    or adapter has a bug. Nothing is changed when it is raised."""


class InexactResumeWarning(UserWarning):
    """A resume will not continue exactly where the run stopped; the message says why."""
