"""The one private name of tqdm the display reads: whether a bar is open (tqdm has no public way to say it)."""

from __future__ import annotations

import sys


def tqdm_bar_open() -> bool:
    """Whether a tqdm bar is open in this process (``tqdm._instances``), where tqdm is already imported. Without
    the name no bar counts as open; the test that then fails is named in docs/design.md."""
    module = sys.modules.get("tqdm.std")
    return module is not None and bool(getattr(module.tqdm, "_instances", None))
