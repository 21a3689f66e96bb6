"""The words of a progress record, defined once: stages, run kinds, event phases, scopes and events.

Each is a :class:`enum.StrEnum`, so a member equals its plain string (``Stage.TRAIN == "train"``)
and either can be passed where the core takes a name. Saved states and views hold the plain
strings (``member.value``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final


class Stage(StrEnum):
    """What a loop does with its batches; each stage has its own epochs and batches."""

    TRAIN = "train"
    VALIDATE = "validate"
    TEST = "test"
    PREDICT = "predict"


EVALUATION_STAGES: Final = (Stage.VALIDATE, Stage.TEST, Stage.PREDICT)
"""The stages that only read the model."""


class RunKind(StrEnum):
    """One call of a framework's entry point: ``fit`` trains (and may validate), the others evaluate."""

    FIT = "fit"
    VALIDATE = "validate"
    TEST = "test"
    PREDICT = "predict"


class Phase(StrEnum):
    """The phases of an event, in order; each is a count of the events that reached it."""

    READY = "ready"  # fetched / about to begin
    STARTED = "started"  # start hooks done
    PROCESSED = "processed"  # step done
    COMPLETED = "completed"  # end hooks done


CANCELLED: Final = "cancelled"
"""The phase ``where`` names after an in-flight event was undone (``cancel_batch()`` or a restore)."""


class Scope(StrEnum):
    """How far back a count reaches, narrowest first."""

    EPOCH = "epoch"  # since the current (or last) epoch of the stage began
    RUN = "run"  # since the current (or last) run began
    LIFETIME = "lifetime"  # the model's whole history, carried by checkpoints


class Event(StrEnum):
    """What a phase count counts."""

    RUN = "run"
    EPOCH = "epoch"
    BATCH = "batch"
