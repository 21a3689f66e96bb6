"""A loader with a public state of its own (``state_dict`` / ``load_state_dict``: torchdata's
``StatefulDataLoader``, or any loader with that protocol) is positioned by that state, through public calls only.

Where the framework saves and restores that state itself (Lightning's loops, Accelerate's
``use_stateful_dataloader``), the position saves none of it. Elsewhere (Ignite, a plain loop) a checkpoint
inside an epoch saves ``loader.state_dict()`` as it is then, and the resume hands it to ``loader.load_state_dict``
right before the resumed epoch's iterator is built: exact where the loader has yielded just the consumed
batches (no prefetch). Either way the resumed iterator is built under the global RNGs and the loader's
generator as the checkpoint left them: its build takes nothing from the training's random stream. The loader
puts itself back as it can: what it reads again (torchdata: an iterable without a state of its own) it reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tracker_core._errors import ProgressStateError
from tracker_core.data._epoch import EpochRecord, Replay
from tracker_core.data._strategy import Strategy
from tracker_core.state._codec import from_plain, to_plain
from tracker_core.state._readers import is_mapping, join_key


class OwnState(Strategy):
    """Leaves the position to the loader's own state: saved and loaded back here, or by the framework."""

    kind = "own_state"
    optional_epoch_keys = ("loader_state",)
    notes_epoch_rng = False
    saves_state = True  # False: the framework saves and restores the loader's state

    def replay(self, replay: Replay) -> Any:
        cursor = self.site.cursor
        cursor.replay = cursor.fast_forward = None
        loader = self.site.loader
        if replay.record.state is not None:
            loader.load_state_dict(replay.record.state)  # type: ignore[attr-defined]
            replay.record.state = None
        generator = loader.generator
        kept = None if generator is None else generator.get_state()
        iterator = self.site.build()
        if generator is not None and kept is not None:
            generator.set_state(kept)  # the build drew from it (torchdata's load may set it back, then draw)
        return iterator

    def epoch_to_plain(self, record: EpochRecord, batches_consumed: int) -> dict[str, Any]:
        if not self.saves_state:
            return {}
        state = record.state  # loaded, its epoch not begun again yet
        if state is None:
            state = self.site.loader.state_dict()  # type: ignore[attr-defined]
        return {"loader_state": to_plain(state, "epoch.loader_state")}

    def read_epoch(self, fields: Mapping[str, Any], key: str, record: EpochRecord, skip: int) -> Any:
        if "loader_state" not in fields:
            return None
        state_key = join_key(key, "loader_state")
        if not is_mapping(fields["loader_state"]):
            raise ProgressStateError(state_key, f"expected a mapping, got {type(fields['loader_state']).__name__}")
        record.state = from_plain(fields["loader_state"], state_key)
        return None
