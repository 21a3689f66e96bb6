"""After a resume, the loggers attached to the engines continue at the checkpoint's iteration.

Ignite's ``TensorboardLogger`` handlers log a trainer's ``ITERATION_*`` event at
``engine.state.iteration``: a run resumed at iteration N logs N + 1 first, and the interrupted
process logged N + 1 and later too. TensorBoard's own purge (``SessionLog.START`` at N + 1, what
``SummaryWriter(purge_step=N + 1)`` writes) makes its readers drop those. A handler that logs at
another step (an epoch, an evaluator's count) and any other logger are named in one warning.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import Any

from ignite.engine import Engine
from ignite.handlers.base_logger import BaseLogger
from ignite.handlers.tensorboard_logger import TensorboardLogger

from tracker_core.adapter import rewind_summary_writer
from tracker_core.integrations.ignite._compat import registered_handlers


def rewind_loggers(trainer: Engine, engines: Iterable[Engine]) -> None:
    """Rewind every logger attached to ``engines`` to ``trainer``'s (restored) iteration; nothing raises."""
    iteration = trainer.state.iteration
    writers: dict[int, TensorboardLogger] = {}
    left: list[str] = []
    for engine in engines:
        for event, handler, arguments in registered_handlers(engine):
            for logger in arguments:
                if not isinstance(logger, BaseLogger):
                    continue
                name = type(logger).__name__
                if not isinstance(logger, TensorboardLogger):
                    left.append(f"{name} (the adapter cannot rewind it)")
                    continue
                writers[id(logger)] = logger
                step = _step_it_logs(handler, engine, event)
                if step != iteration:
                    tag = getattr(handler, "tag", type(handler).__name__)
                    left.append(f"{name} {tag!r} on {event} (it logs at step {step}, not the trainer's iteration)")
    for logger in writers.values():
        try:
            problem = rewind_summary_writer(logger.writer, iteration + 1)
            if problem:
                left.append(f"{type(logger).__name__} ({problem})")
        except Exception as error:  # the first law: a log never stops the training
            left.append(f"{type(logger).__name__} ({type(error).__name__}: {error})")
    if left:
        warnings.warn(
            f"resumed at iteration {iteration}: the points these loggers got from the interrupted run after "
            f"its checkpoint stay, beside this run's: {'; '.join(dict.fromkeys(left))}",
            UserWarning,
            stacklevel=2,
        )


def _step_it_logs(handler: Any, engine: Engine, event: Any) -> object:
    """The step ``handler`` would log at on ``event`` of ``engine`` now (None if it cannot be told)."""
    try:
        transform = getattr(handler, "global_step_transform", None)
        if transform is not None:
            return transform(engine, event)
        return engine.state.get_event_attrib_value(event)
    except Exception:
        return None
