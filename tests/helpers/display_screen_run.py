"""A short run with the progress display, for the screen tests: ``python -m helpers.display_screen_run lightning``
(a fit with ``prog_bar`` metrics) or ``... ignite`` (a run with Ignite's tqdm ProgressBar beside the display)."""

from __future__ import annotations

import sys
import time
from typing import Any

import torch


def _lightning() -> None:
    import pytorch_lightning as pl

    from tracker_core.integrations.lightning import ProgressDisplay

    from helpers.lightning_program import Recording, loader

    class Logging(Recording):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
            time.sleep(0.05)  # long enough for a live line to be drawn
            self.log("loss", 0.25, prog_bar=True)
            return super().training_step(batch, batch_idx)

        def validation_step(self, batch: Any, batch_idx: int) -> None:
            self.log("val_loss", 0.5, prog_bar=True, on_epoch=True)

    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=[ProgressDisplay()],
    )
    trainer.fit(Logging(), loader(24, 3), loader(5, 3))


def _ignite() -> None:
    from ignite.engine import Events
    from ignite.handlers import ProgressBar

    from tracker_core.integrations.ignite import ProgressDisplay

    from helpers.ignite_program import Config, build

    program = build(Config(), seed=0)
    program.trainer.add_event_handler(Events.ITERATION_COMPLETED, lambda: time.sleep(0.05))
    ProgressBar(mininterval=0).attach(program.trainer)
    display = ProgressDisplay()
    display.attach(program.trainer, output_transform=lambda loss: {"loss": loss})
    display.attach(program.evaluator)
    program.run()


if __name__ == "__main__":
    {"lightning": _lightning, "ignite": _ignite}[sys.argv[1]]()
