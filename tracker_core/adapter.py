"""What an adapter needs from the core besides ``tracker_core`` itself and the keys of ``tracker_core.checkpoints``;
docs/adapters.md gives the event contract and a worked example on a plain PyTorch loop."""

from tracker_core._heartbeat import keep_heartbeat, read_heartbeat
from tracker_core._logs import rewind_summary_writer
from tracker_core.checkpoints import _accelerate as accelerate_checkpoint
from tracker_core.counting._batch_size import batches_in, samples_in
from tracker_core.counting._dataloaders import count_combined_batch
from tracker_core.counting._optimizer_hooks import count_skipped_steps
from tracker_core.counting._registry import register_progress
from tracker_core.counting._resync import (
    abandon_in_flight,
    continue_run_scope,
    reenter_evaluation_epoch,
    reenter_last_run,
)
from tracker_core.counting._scheduler_steps import count_scheduler_steps
from tracker_core.counting._tokens import TokenCounter
from tracker_core.data._resume_rng_check import ResumeRngCheck
from tracker_core.data._rng import GlobalRng
from tracker_core.display._display import Display
from tracker_core.distributed._elastic import saved_elsewhere
from tracker_core.distributed._rank_files import (
    RankFiles,
    RankTensors,
    remove_other_saves,
    with_rank_files,
    write_rank_files,
    write_rank_tensors,
)
from tracker_core.distributed._to_writer import gather_to_writer
from tracker_core.state._gradients import capture_gradients, restore_gradients
from tracker_core.state._model_lifetime import bind_lifetime
from tracker_core.state._readers import read_mapping

__all__ = [
    "Display",
    "GlobalRng",
    "RankFiles",
    "RankTensors",
    "ResumeRngCheck",
    "TokenCounter",
    "abandon_in_flight",
    "accelerate_checkpoint",
    "batches_in",
    "bind_lifetime",
    "capture_gradients",
    "continue_run_scope",
    "count_combined_batch",
    "count_scheduler_steps",
    "count_skipped_steps",
    "gather_to_writer",
    "keep_heartbeat",
    "read_heartbeat",
    "read_mapping",
    "reenter_evaluation_epoch",
    "reenter_last_run",
    "register_progress",
    "remove_other_saves",
    "restore_gradients",
    "rewind_summary_writer",
    "samples_in",
    "saved_elsewhere",
    "with_rank_files",
    "write_rank_files",
    "write_rank_tensors",
]
