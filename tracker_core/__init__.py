"""tracker-core: one framework-neutral record of how far a training run has got."""

from tracker_core._errors import EventOrderError, InexactResumeWarning, ProgressStateError
from tracker_core._heartbeat import HeartbeatWarning
from tracker_core._tracker import Tracker
from tracker_core._version import __version__ as __version__
from tracker_core.counting._counts import PhaseCounts, ScopeCounts
from tracker_core.counting._optimizer_hooks import count_optimizer_steps
from tracker_core.counting._progress import Progress
from tracker_core.counting._registry import get_progress
from tracker_core.counting._stage import StageProgress, TrainStageProgress
from tracker_core.counting._view import (
    BatchCounts,
    DataloaderCounts,
    EpochCounts,
    OverheadSeconds,
    ProgressView,
    RunCounts,
    RunSeconds,
    ScopeRates,
    ScopeSeconds,
    StageView,
    TrainStageView,
    Where,
)
from tracker_core.distributed._sync import Divergence, check_divergence, reduce_state
from tracker_core.state._comparable import comparable_state
from tracker_core.state._model_lifetime import lifetimes_in, track_lifetime, without_lifetime
from tracker_core.state._schema import SCHEMA_VERSION
from tracker_core.vocabulary import Event, Phase, RunKind, Scope, Stage

__all__ = [
    "SCHEMA_VERSION",
    "BatchCounts",
    "DataloaderCounts",
    "Divergence",
    "EpochCounts",
    "Event",
    "EventOrderError",
    "HeartbeatWarning",
    "InexactResumeWarning",
    "OverheadSeconds",
    "Phase",
    "PhaseCounts",
    "Progress",
    "ProgressStateError",
    "ProgressView",
    "RunCounts",
    "RunKind",
    "RunSeconds",
    "Scope",
    "ScopeCounts",
    "ScopeRates",
    "ScopeSeconds",
    "Stage",
    "StageProgress",
    "StageView",
    "Tracker",
    "TrainStageProgress",
    "TrainStageView",
    "Where",
    "check_divergence",
    "comparable_state",
    "count_optimizer_steps",
    "get_progress",
    "lifetimes_in",
    "reduce_state",
    "track_lifetime",
    "without_lifetime",
]
