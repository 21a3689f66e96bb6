"""The words of a progress record, defined once: stages, run kinds, event phases, scopes and events. Each is a
:class:`enum.StrEnum`: a member equals its plain string (``Stage.TRAIN == "train"``), which states and views hold."""

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
    """The phases of an event, in order: ``ready`` (fetched / about to begin), ``started`` (start hooks done),
    ``processed`` (step done), ``completed`` (end hooks done); each is a count of the events that reached it."""

    READY = "ready"
    STARTED = "started"
    PROCESSED = "processed"
    COMPLETED = "completed"


CANCELLED: Final = "cancelled"
"""The phase ``where`` names after an in-flight event was undone (``cancel_batch()`` or a restore)."""


class Scope(StrEnum):
    """How far back a count reaches, narrowest first: since the stage's current (or last) epoch began, since the
    current (or last) run began, the model's whole history (carried by checkpoints)."""

    EPOCH = "epoch"
    RUN = "run"
    LIFETIME = "lifetime"


class Event(StrEnum):
    """What a phase count counts."""

    RUN = "run"
    EPOCH = "epoch"
    BATCH = "batch"
