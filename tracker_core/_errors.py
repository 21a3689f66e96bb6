"""The error types of tracker-core."""

from __future__ import annotations


class ProgressStateError(ValueError):
    """A progress state is malformed, truncated, inconsistent or from a newer schema.

    ``key`` is the dotted path of the offending entry (``""`` for the whole state);
    the message names it and the problem. Raised before anything is changed.
    """

    def __init__(self, key: str, problem: str) -> None:
        self.key = key
        self.problem = problem
        where = key if key else "<root>"
        super().__init__(f"progress state {where!r}: {problem}")


class EventOrderError(RuntimeError):
    """An event phase was marked out of order (e.g. a batch completed before it was processed).

    Raised by the owner's mutating API; it means the driving loop or adapter has a bug.
    Nothing is changed when it is raised.
    """


class InexactResumeWarning(UserWarning):
    """A resume will not continue exactly where the run stopped; the message says why."""
