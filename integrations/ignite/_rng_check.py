"""When Ignite compares the global RNGs with the ones a ``Checkpoint.load_objects`` restored.

The comparing and warning is the core's ``ResumeRngCheck``. Here: at the trainer's
``STARTED`` (a ``torch.manual_seed`` after loading, as in Ignite's own save/resume example),
and before the first resumed batch is fetched when that batch continues the saved epoch (a
draw in a ``STARTED`` / ``EPOCH_STARTED`` handler the uninterrupted run did not run there).
"""

from __future__ import annotations

from ignite.engine import Engine, Events

from tracker_core.adapter import ResumeRngCheck


class RngCheck(ResumeRngCheck):
    """Compares the global RNGs with the loaded ones at the trainer's STARTED and before its first resumed batch."""

    def __init__(self) -> None:
        super().__init__(load="Checkpoint.load_objects")

    def started(self) -> None:
        """The trainer's STARTED after the load, before anything of the resumed run draws."""
        self.check("between Checkpoint.load_objects and the trainer's run()")

    def first_batch_continues_the_epoch(self, engine: Engine, continues: bool) -> None:
        """Check again at the first batch if it continues the saved epoch (``continues``).

        A resume at an epoch boundary draws legitimately before its first batch (the next
        epoch's sampler, as the uninterrupted run did): it is checked at STARTED only.
        """
        if not continues or not self.armed:
            self.forget()
            return

        def first_batch(engine: Engine) -> None:  # the engine as Ignite's argument: none held here
            engine.remove_event_handler(first_batch, Events.GET_BATCH_STARTED)
            self.check("in a STARTED or EPOCH_STARTED handler of the resumed run", last=True)

        # Before the batch is fetched: fetching it may draw (a sampler that starts lazily) in both runs.
        engine.add_event_handler(Events.GET_BATCH_STARTED, first_batch)
