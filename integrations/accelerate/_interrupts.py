"""Tells Ctrl-C from a crash when an exception leaves the fit's loop: Python shows the closing loop neither.

A generator closed by an exception unwinding its loop sees ``GeneratorExit`` only; on Python 3.11 a
``KeyboardInterrupt`` that SIGINT raised is not even an object yet there. So while a fit run is open in the
main thread, the SIGINT handler in force is called through :meth:`InterruptWatch._handle`, which keeps the
traceback of the ``KeyboardInterrupt`` that handler raises (Python's own handler raises one). The loop was
left by that interrupt when the traceback unwinding the loop's frame continues that one.
"""

from __future__ import annotations

import gc
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any


class InterruptWatch:
    """The SIGINT handler in force, called through this object while a fit run is open (main thread only).

    The handler still runs and its exception goes on unchanged (its traceback shows one frame more); a
    handler the program sets meanwhile stays, and so does one it had set when :meth:`start` was called.
    The wrapper keeps calling the handler it wraps after :meth:`stop`, should the program have kept it and
    put it back later.
    """

    __slots__ = ("_raised", "_watching", "_wrapped")

    def __init__(self) -> None:
        self._wrapped: Callable[[int, FrameType | None], Any] = signal.default_int_handler  # what _handle calls
        self._watching = False
        self._raised: TracebackType | None = None  # of the last KeyboardInterrupt the handler raised

    def __reduce__(self) -> tuple[type[InterruptWatch], tuple[()]]:
        """Pickled (and copied) as a watch that is off: a handler and a traceback do not pickle."""
        return InterruptWatch, ()

    def start(self) -> None:
        """Watch SIGINT (nothing outside the main thread, or when its handler is not a Python callable)."""
        if self._watching or threading.current_thread() is not threading.main_thread():
            return
        previous = signal.getsignal(signal.SIGINT)
        if previous == self._handle:  # the program put this wrapper back: it still calls what it wrapped
            self._watching = True
            return
        if not callable(previous):  # ignored, the default action, or set outside Python: no exception to see
            return
        self._wrapped, self._watching = previous, True
        signal.signal(signal.SIGINT, self._handle)

    def stop(self) -> None:
        """Stop watching: the handler in force when the watch began is back, unless the program set another."""
        watching, self._watching, self._raised = self._watching, False, None
        if watching and signal.getsignal(signal.SIGINT) == self._handle:
            signal.signal(signal.SIGINT, self._wrapped)

    def _handle(self, signum: int, frame: FrameType | None) -> Any:
        try:
            return self._wrapped(signum, frame)
        except KeyboardInterrupt as interrupt:
            if self._watching:
                self._raised = interrupt.__traceback__
            raise

    def left_by_interrupt(self) -> bool:
        """Called in a generator's ``GeneratorExit`` handler that ``closed_by_exception`` says an exception closed:
        True when that exception is the ``KeyboardInterrupt`` the watched handler raised last. Its traceback, as it
        unwinds the frame that closed the generator (or one that called it: a generator over the loop), continues
        the one kept when the handler raised it. A full scan of the collector's objects, only after a Ctrl-C."""
        raised = self._raised
        if raised is None:
            return False
        frames: list[FrameType] = []
        caller: FrameType | None = sys._getframe(2)
        while caller is not None:
            frames.append(caller)
            caller = caller.f_back
        for unwinding in gc.get_referrers(*frames):
            if type(unwinding) is not TracebackType or unwinding.tb_lasti != unwinding.tb_frame.f_lasti:
                continue
            link: TracebackType | None = unwinding
            while link is not None:
                if link is raised:
                    return True
                link = link.tb_next
        return False
