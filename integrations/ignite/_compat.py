"""Every private attribute of Ignite the adapter touches, in one place, checked when imported."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ignite
from ignite.engine import Engine
from ignite.handlers import Checkpoint, DiskSaver

from tracker_core.integrations._extra import check_attributes

ProcessFunction = Callable[[Engine, Any], Any]


def prepend_handler(engine: Engine, event: Any, handler: Callable[..., None]) -> None:
    """Register ``handler`` for ``event`` ahead of every handler already there (Ignite has no public way)."""
    engine.add_event_handler(event, handler)
    handlers = engine._event_handlers[event]
    handlers.insert(0, handlers.pop())


def wrap_process_function(engine: Engine, wrap: Callable[[ProcessFunction], ProcessFunction]) -> None:
    """Make ``engine`` run ``wrap(its process function)`` as its step from now on (Ignite has no public way).

    Ignite calls the step as ``state.output = step(engine, state.batch)`` and fires
    ``ITERATION_COMPLETED`` right after: work the wrapper does once the step returns is done
    ahead of every ``ITERATION_COMPLETED`` handler, without a handler call of Ignite's. A step
    set on the engine afterwards must call the one it replaces (else its batches end as cut, noted).
    """
    engine._process_function = wrap(engine._process_function)


def on_exception_leaving(engine: Engine, note: Callable[[BaseException], None]) -> None:
    """Call ``note(exception)`` when an exception leaves ``engine``'s run or epoch (Ignite has no public way).

    Ignite passes every exception of a run to ``_handle_exception``, which re-raises it unless an
    ``EXCEPTION_RAISED`` handler takes it; ``note`` runs only when it is re-raised (the exception leaves
    the run), then the exception goes on unchanged. Registering an ``EXCEPTION_RAISED`` handler instead
    would make Ignite swallow every exception.
    """
    handle = engine._handle_exception

    def handle_exception(exception: BaseException) -> None:
        try:
            handle(exception)
        except BaseException as leaving:
            note(leaving)
            raise

    engine._handle_exception = handle_exception  # type: ignore[method-assign, assignment]


def registered_handlers(engine: Engine) -> list[tuple[Any, Callable[..., Any], tuple[Any, ...]]]:
    """``(event, handler, arguments)`` of each handler on ``engine`` (a filtered event's handler unwrapped)."""
    found = []
    for event, entries in engine._event_handlers.items():
        for handler, arguments, _ in entries:
            parent = getattr(handler, "_parent", None)
            found.append((event, parent() if parent is not None else handler, tuple(arguments)))
    return found


def checkpoint_dirnames(engine: Engine, holding: object | None = None) -> list[str]:
    """The folders of the ``Checkpoint(..., DiskSaver(dirname))`` handlers registered on ``engine`` (a
    ``ModelCheckpoint``, or a folder given as ``save_handler``, among them), each once, in Ignite's order (by
    event, then registration); with ``holding``, only those whose ``to_save`` holds that object. A
    ``Checkpoint`` called by hand, or saving elsewhere than to a ``DiskSaver``, has no folder here."""
    found: list[str] = []
    for _, handler, _ in registered_handlers(engine):
        if not isinstance(handler, Checkpoint) or not isinstance(handler.save_handler, DiskSaver):
            continue
        if holding is not None and not any(saved is holding for saved in handler.to_save.values()):
            continue
        folder = str(handler.save_handler.dirname)
        if folder not in found:
            found.append(folder)
    return found


def set_batches_into_epoch(engine: Engine, batches: int) -> None:
    """Make Ignite's next epoch iteration start at its batch ``batches`` (Ignite's ``_init_iter``)."""
    engine._init_iter = batches


check_attributes(
    "pytorch-ignite",
    ignite.__version__,
    {
        "Engine": (Engine, ("_event_handlers", "_handle_exception", "_init_iter", "_process_function")),
        "Checkpoint": (Checkpoint, ("to_save", "save_handler")),
        "DiskSaver": (DiskSaver, ("dirname",)),
    },
)
