"""PyTorch Ignite adapter: ``ProgressHandler``, ``ProgressDisplay``, ``RoundRobin``, ``RankFilesSaver`` (docs/ignite.md)."""

from tracker_core.integrations._extra import require

require("ignite.engine", "ignite")

from tracker_core.integrations.ignite._display import ProgressDisplay  # noqa: E402
from tracker_core.integrations.ignite._handler import ProgressHandler  # noqa: E402
from tracker_core.integrations.ignite._rank_files import RankFilesSaver  # noqa: E402
from tracker_core.integrations.ignite._round_robin import RoundRobin  # noqa: E402

__all__ = ["ProgressDisplay", "ProgressHandler", "RankFilesSaver", "RoundRobin"]
