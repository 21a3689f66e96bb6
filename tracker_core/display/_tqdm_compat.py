"""The one private name of tqdm the display reads: whether a bar is open (tqdm has no public way to say it)."""

from __future__ import annotations

import sys


def tqdm_bar_open() -> bool:
    """Whether a tqdm bar is open in this process (tqdm keeps its open, enabled bars in ``tqdm._instances``).

    Read only where tqdm is already imported. If a tqdm release drops the name, no bar counts as open (the live
    line draws beside the user's bar): ``tests/test_display_core.py``'s
    ``test_on_a_terminal_with_a_tqdm_bar_open_no_live_line_is_drawn_only_the_kept_lines`` fails by name.
    """
    module = sys.modules.get("tqdm.std")
    return module is not None and bool(getattr(module.tqdm, "_instances", None))
