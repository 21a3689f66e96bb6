"""Through each framework, a resume that must read trained batches again warns first and records the time it took.

The train data is an iterable with no state of its own whose every sample takes ``READ_S`` to read,
read by torchdata's StatefulDataLoader: a mid-epoch resume reads the epoch's trained batches again
(nothing else can put the dataset back; a plain DataLoader's resume reads the epoch from its start
instead, reading nothing again). The resumed run, on the real clock, warns before (``SlowResumeWarning`` naming the batch count) and its
progress shows the seconds in ``view.overhead_seconds.fast_forward`` and saves them in
``microseconds.fast_forward``, at least the reading time of the batches read again.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tracker_core.counting import _clock
from tracker_core.data._fast_forward import SlowResumeWarning

from helpers.clock import REAL_NOW_US

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")

READ_S = 0.002  # per sample


def _assert_recorded(view: Any, saved_progress: dict[str, Any], batches: int, batch_size: int) -> None:
    seconds = view.overhead_seconds.fast_forward.lifetime
    assert seconds >= batches * batch_size * READ_S
    assert saved_progress["microseconds"]["fast_forward"]["lifetime"] == round(seconds * 1e6)


def test_lightning_resume_that_reads_again_warns_and_records_its_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("pytorch_lightning")
    from torchdata.stateful_dataloader import StatefulDataLoader

    from tracker_core.integrations.lightning import ProgressTracker

    from helpers.lightning_program import IndexedStream, Recording, SaveAndStop, Stop, trainer

    class SlowStream(IndexedStream):
        def __iter__(self) -> Iterator[Any]:
            for sample in super().__iter__():
                time.sleep(READ_S)
                yield sample

    def fit(callbacks: list[Any], ckpt_path: Path | None) -> ProgressTracker:
        tracker = ProgressTracker()
        with contextlib.suppress(Stop):
            trainer([tracker, *callbacks], max_epochs=2, limit_val_batches=0).fit(
                Recording(), StatefulDataLoader(SlowStream(12), batch_size=3), ckpt_path=ckpt_path
            )
        return tracker

    fit([SaveAndStop(tmp_path / "mid.ckpt", global_step=6)], None)  # at batch 2 of epoch 1 (4 an epoch)
    monkeypatch.setattr(_clock, "now_us", REAL_NOW_US)
    with pytest.warns(SlowResumeWarning, match="reading again the 2 batches"):
        resumed = fit([], tmp_path / "mid.ckpt")
    _assert_recorded(resumed.tracker.view, resumed.tracker.state_dict()["progress"], batches=2, batch_size=3)


def test_ignite_resume_that_reads_again_warns_and_records_its_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("ignite")
    from ignite.handlers import Checkpoint
    from torchdata.stateful_dataloader import StatefulDataLoader

    from helpers.ignite_program import BATCH, TRAIN_SIZE, Config, Stream, build, save_every_iteration

    class SlowStream(Stream):
        def __iter__(self) -> Iterator[Any]:
            for sample in super().__iter__():
                time.sleep(READ_S)
                yield sample

    config = Config(iterable=True, stateful=True)
    first = build(config, seed=0)
    first.loader = StatefulDataLoader(SlowStream(TRAIN_SIZE), batch_size=BATCH)
    save_every_iteration(first, tmp_path)
    first.run()
    monkeypatch.setattr(_clock, "now_us", REAL_NOW_US)
    resumed = build(config, seed=1234)
    resumed.loader = StatefulDataLoader(SlowStream(TRAIN_SIZE), batch_size=BATCH)
    Checkpoint.load_objects(resumed.to_save(), str(tmp_path / "6.pt"))  # batch 2 of epoch 2 (4 an epoch)
    with pytest.warns(SlowResumeWarning, match="reading again the 2 batches"):
        resumed.run()
    _assert_recorded(
        resumed.progress.view, resumed.progress._tracker.state_dict()["progress"], batches=2, batch_size=BATCH
    )


def test_accelerate_resume_that_reads_again_warns_and_records_its_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("accelerate")
    from helpers import accelerate_drive
    from helpers.accelerate_drive import Setup, StopAt, run

    class SlowStreamed(accelerate_drive.Streamed):
        def __iter__(self) -> Iterator[Any]:
            for sample in super().__iter__():
                time.sleep(READ_S)
                yield sample

    monkeypatch.setattr(accelerate_drive, "Streamed", SlowStreamed)
    setup = Setup(iterable=True, stateful=True)  # use_stateful_dataloader
    run(setup, stop=StopAt(5), save_dir=str(tmp_path))  # batch 1 of epoch 1 (4 an epoch)
    monkeypatch.setattr(_clock, "now_us", REAL_NOW_US)
    with pytest.warns(SlowResumeWarning, match="reading again the 2 batches"):
        resumed = run(setup, load_dir=str(tmp_path), seed_value=7)
    _assert_recorded(resumed.progress.view, resumed.state, batches=2, batch_size=setup.batch_size)
