"""Through each framework, a resume loads only the samples still to train: none of those trained before the checkpoint.

Each run trains a shuffled map-style dataset that counts its ``__getitem__`` calls, and an iterable
with its own ``state_dict`` over it (``helpers/counted_stream.py``), through a torch
``DataLoader`` and a torchdata ``StatefulDataLoader`` (resumed through its own state), is stopped right after a
mid-epoch checkpoint and resumed in fresh objects to the end. Every sample the resumed run loads is one it trains:
nothing is read again (reading and dropping batches would load them). A ``StatefulDataLoader`` resumes at its batch;
a plain ``DataLoader`` is not positioned (the resume warns ``InexactResumeWarning``): the framework reads the resumed
epoch from its first batch, as many batches as its own counters leave (Lightning, Ignite) or the whole epoch
(Accelerate's loop).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torchdata")

import torch
from torch.utils.data import DataLoader, IterableDataset
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import InexactResumeWarning

pytestmark = [
    pytest.mark.filterwarnings("ignore:'set_vital' is deprecated"),
    pytest.mark.filterwarnings("error::tracker_core.data._fast_forward.SlowResumeWarning"),
]

LOADERS = {"dataloader": DataLoader, "stateful-dataloader": StatefulDataLoader}


def _trained(batches: list[list[int]]) -> int:
    return sum(len(batch) for batch in batches)


def _resume_warning(kind: str) -> Any:
    """A plain DataLoader resumed mid-epoch warns that its epoch is read by the framework's rule."""
    if kind == "dataloader":
        return pytest.warns(InexactResumeWarning, match="^resuming DataLoader .* StatefulDataLoader")
    return contextlib.nullcontext()


# --- Lightning --------------------------------------------------------------------------------


@pytest.mark.parametrize("data", ["map-style", "iterable-with-state"])
@pytest.mark.parametrize("kind", list(LOADERS))
def test_lightning_resume_loads_only_samples_it_trains(kind: str, data: str, tmp_path: Path) -> None:
    pytest.importorskip("pytorch_lightning")
    from tracker_core.integrations.lightning import ProgressTracker

    from helpers.lightning_program import Indexed, Recording, SaveAndStop, Stop, trainer

    class Counted(Indexed):
        def __init__(self) -> None:
            super().__init__(12)
            self.loads = 0

        def __getitem__(self, i: int) -> Any:
            self.loads += 1
            return super().__getitem__(i)

    class CountedStream(IterableDataset[Any]):
        """The samples of ``Counted`` in order; its position is its own state (torchdata's protocol)."""

        def __init__(self) -> None:
            self.samples = Counted()
            self.position = 0

        @property
        def loads(self) -> int:
            return self.samples.loads

        def __len__(self) -> int:  # Lightning prefetches no batch of a loader with a length
            return len(self.samples)

        def __iter__(self) -> Any:
            self.position = 0
            return self

        def __next__(self) -> Any:
            if self.position == len(self.samples):
                raise StopIteration
            self.position += 1
            return self.samples[self.position - 1]

        def state_dict(self) -> dict[str, int]:
            return {"position": self.position}

        def load_state_dict(self, state: dict[str, int]) -> None:
            self.position = state["position"]

    def fit(seed: int, callbacks: list[Any], ckpt_path: Path | None) -> tuple[Recording, Any]:
        torch.manual_seed(seed)
        model = Recording()
        samples: Any = Counted() if data == "map-style" else CountedStream()
        loader = LOADERS[kind](samples, batch_size=3, shuffle=data == "map-style")
        with contextlib.suppress(Stop):
            trainer([ProgressTracker(), *callbacks], max_epochs=2, limit_val_batches=0).fit(
                model, loader, ckpt_path=ckpt_path
            )
        return model, samples

    first, _ = fit(0, [SaveAndStop(tmp_path / "mid.ckpt", global_step=6)], None)  # at batch 2 of epoch 1 (4 an epoch)
    with _resume_warning(kind):
        resumed, samples = fit(1, [], tmp_path / "mid.ckpt")
    assert _trained(first.seen) + _trained(resumed.seen) == 2 * 12  # Lightning's counters: the epoch's 2 left
    assert samples.loads == _trained(resumed.seen)


# --- Ignite -----------------------------------------------------------------------------------


@pytest.mark.parametrize("data", ["map-style", "iterable-with-state"])
@pytest.mark.parametrize("kind", list(LOADERS))
def test_ignite_resume_loads_only_samples_it_trains(kind: str, data: str, tmp_path: Path) -> None:
    pytest.importorskip("ignite")
    from ignite.handlers import Checkpoint

    from helpers.counted_stream import CountedStream
    from helpers.ignite_program import BATCH, EPOCHS, TRAIN_SIZE, Config, Indexed, build, save_every_iteration

    class Counted(Indexed):
        def __init__(self) -> None:
            super().__init__(TRAIN_SIZE)
            self.loads = 0

        def __getitem__(self, index: int) -> Any:
            self.loads += 1
            return super().__getitem__(index)

    def loader(samples: Counted) -> Any:
        if data == "map-style":
            return LOADERS[kind](samples, batch_size=BATCH, shuffle=True)
        return LOADERS[kind](CountedStream(samples), batch_size=BATCH)

    config = Config(stateful=kind == "stateful-dataloader", iterable=data != "map-style")
    first = build(config, seed=0)
    first.loader = loader(Counted())
    save_every_iteration(first, tmp_path)
    first.run()
    resumed = build(config, seed=1234)
    samples = Counted()
    resumed.loader = loader(samples)
    Checkpoint.load_objects(resumed.to_save(), str(tmp_path / "6.pt"))  # batch 2 of epoch 2 (4 an epoch)
    with _resume_warning(kind):
        resumed.run()
    if kind == "stateful-dataloader":
        assert _trained(resumed.seen) == EPOCHS * TRAIN_SIZE - _trained(first.seen[:6])
    else:  # Ignite's counters: the iterations left, drawn from a fresh iterator kept across its epochs
        assert len(resumed.seen) == len(first.seen) - 6
    assert samples.loads == _trained(resumed.seen)


# --- Accelerate -------------------------------------------------------------------------------


@pytest.mark.parametrize("data", ["map-style", "iterable-with-state"])
@pytest.mark.parametrize("kind", list(LOADERS))
def test_accelerate_resume_loads_only_samples_it_trains(
    kind: str, data: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("accelerate")
    from helpers import accelerate_drive
    from helpers.accelerate_drive import Setup, StopAt, run
    from helpers.counted_stream import CountedStream

    loads: list[int] = []

    class Counted(accelerate_drive.Indexed):
        def __getitem__(self, index: int) -> Any:
            if self.size == setup.samples:  # the train data, not the validation data
                loads.append(index)
            return super().__getitem__(index)

    class CountedStreamed(CountedStream):
        """Replaces the program's iterable: the train samples in order, with its own position."""

        def __init__(self, size: int) -> None:
            super().__init__(Counted(size))

    monkeypatch.setattr(accelerate_drive, "Indexed", Counted)
    monkeypatch.setattr(accelerate_drive, "Streamed", CountedStreamed)
    setup = Setup(stateful=kind == "stateful-dataloader", iterable=data != "map-style")
    first = run(setup, stop=StopAt(5), save_dir=str(tmp_path))  # batch 1 of epoch 1 (4 an epoch)
    loads.clear()
    with _resume_warning(kind):
        resumed = run(setup, load_dir=str(tmp_path), seed_value=7)
    # a plain loader's resumed epoch is read whole by Accelerate's loop: its 2 batches trained before, again
    again = 2 * setup.batch_size if kind == "dataloader" else 0
    assert _trained(first.train_ids) + _trained(resumed.train_ids) == setup.epochs * setup.samples + again
    assert len(loads) == _trained(resumed.train_ids)
