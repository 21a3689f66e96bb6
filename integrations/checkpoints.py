"""Reading progress back from checkpoint files without the framework, and choosing the one to resume from.

::

    from tracker_core.integrations.checkpoints import newest_intact_checkpoint
    trainer.fit(model, ckpt_path=newest_intact_checkpoint("checkpoints/"))

See docs/cli.md (``progress-tracker inspect`` / ``diff`` use the same functions).
"""

from tracker_core.integrations._checkpoint_files import (
    CheckpointFileError,
    ProgressCheckpoint,
    newest_intact_checkpoint,
    read_checkpoint,
)

__all__ = ["CheckpointFileError", "ProgressCheckpoint", "newest_intact_checkpoint", "read_checkpoint"]
