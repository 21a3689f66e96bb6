"""How a test's distributed rank script ends once its files are written."""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def exit_rank() -> NoReturn:
    """End this process with 0 now, without the interpreter's finalization.

    A gloo worker thread may still hold the work of DDP's last gradient all-reduce, which keeps a Python object
    (the context ``backward`` stashes); dropped while the interpreter finalizes, it aborts the process with
    "terminate called without an active exception", ``destroy_process_group()`` or not: PyTorch's, with or
    without the tracker (docs/distributed.md, "An abort as a gloo run exits"). tests/test_two_rank_exits.py is
    the test that lets its ranks finalize.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
