"""A run killed at any batch and resumed with ``fit(ckpt_path=...)`` ends exactly like an uninterrupted one."""

from __future__ import annotations

import contextlib
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("torchdata")

import pytorch_lightning as pl
import torch
from pytorch_lightning.utilities import CombinedLoader
from torch.utils.data import DataLoader, DistributedSampler, SequentialSampler
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import InexactResumeWarning
from tracker_core.integrations.lightning import ProgressTracker

from helpers.ledger import without_ledger
from helpers.lightning_oracle import Oracle
from helpers.lightning_program import Crashing, Indexed, IndexedStream, Recording, trainer, weights
from helpers.lightning_reseed import Noisy

EPOCHS = 2
BATCHES = 4  # 10 samples in batches of 3: 3, 3, 3, 1


class Killed(Exception):
    """Stands in for the process being killed right after a checkpoint."""


class KillAfter(pl.Callback):
    """Saves a checkpoint at the end of train batch number ``at`` (counted over the run), then dies.

    With ``in_validation``, at the end of the ``at``-th validation batch instead (sanity check excluded).
    """

    def __init__(self, at: int, path: Path, in_validation: bool = False) -> None:
        self.at = at
        self.path = path
        self.count = 0
        self.in_validation = in_validation

    def _count(self, trainer: pl.Trainer) -> None:
        self.count += 1
        if self.count == self.at + 1:
            trainer.save_checkpoint(self.path)
            raise Killed

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if not self.in_validation:
            self._count(trainer)

    def on_validation_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if self.in_validation and not trainer.sanity_checking:
            self._count(trainer)


class KillAtEpochEnd(KillAfter):
    """Saves at the end of train epoch number ``at`` (like ModelCheckpoint's default), then dies."""

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        pass

    def on_train_epoch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self._count(trainer)


class KillAtBatchStart(KillAfter):
    """Saves at the start of train batch number ``at`` (Lightning has fetched it, not yet run it), then dies."""

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        pass

    def on_train_batch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        self._count(trainer)


@dataclass
class Outcome:
    seen: list[list[int]]
    weights: list[torch.Tensor]
    progress: dict[str, Any]
    loader: Any = None  # the train loader
    disagreements: list[str] = field(default_factory=list)  # the oracle's, with Lightning's counters


class SizedStream(IndexedStream):
    """:class:`IndexedStream` with a length: Lightning then fetches no batch ahead of the one it runs."""

    def __len__(self) -> int:
        return self.n


def _loader(config: str) -> DataLoader:
    shuffle = "shuffle" in config
    workers = 2 if "workers" in config else 0
    cls = StatefulDataLoader if "stateful" in config else DataLoader
    data = (SizedStream() if "sized" in config else IndexedStream()) if "stream" in config else Indexed()
    data = Noisy() if "noisy" in config else data
    kwargs: dict[str, Any] = {"num_workers": workers}
    if "distributed" in config:  # the user's own: Lightning sets its epoch after it built the resumed iterator
        kwargs["sampler"] = DistributedSampler(data, num_replicas=1, rank=0, shuffle=True)
    if workers:
        kwargs["multiprocessing_context"] = "fork"
    return cls(data, batch_size=3, shuffle=shuffle, **kwargs)


class _BuildsItsLoader(Recording):
    """Builds its train loader in ``train_dataloader()``, which Lightning calls after ``fit(ckpt_path=...)`` loaded."""

    def __init__(self, config: str) -> None:
        super().__init__()
        self.config = config
        self.loader: DataLoader | None = None

    def train_dataloader(self) -> DataLoader:
        self.loader = _loader(self.config)
        return self.loader


def _fit(config: str, seed: int, kill_at: int | None = None, path: Path | None = None) -> Outcome:
    torch.manual_seed(seed)
    model = _BuildsItsLoader(config) if "in-module" in config else Recording()
    oracle = Oracle()
    callbacks: list[pl.Callback] = [ProgressTracker(), oracle]
    if kill_at is not None:
        assert path is not None
        kill = KillAtEpochEnd if "kill-at-epoch-end" in config else KillAfter
        kill = KillAtBatchStart if "kill-at-batch-start" in config else kill
        killer = kill(kill_at, path, in_validation="kill-in-validation" in config)
        callbacks.insert(0 if "killer-first" in config else 1, killer)
    accumulate = 3 if "accumulate" in config else 1
    validation: dict[str, Any] = {"val_check_interval": 2} if "validate" in config else {"limit_val_batches": 0}
    if "validate-every-2-epochs" in config:
        validation = {"check_val_every_n_epoch": 2}
    fit = trainer(callbacks, max_epochs=EPOCHS, accumulate_grad_batches=accumulate, **validation)
    persistent: dict[str, Any] = {"num_workers": 1, "persistent_workers": True, "multiprocessing_context": "fork"}
    val_workers = persistent if "persistent-validation" in config else {}
    val = DataLoader(Indexed(7), batch_size=3, **val_workers) if "validate" in config else None
    train = None if isinstance(model, _BuildsItsLoader) else _loader(config)
    with contextlib.suppress(Killed):
        fit.fit(model, train, val, ckpt_path=None if kill_at is not None else path)
    tracker = next(c for c in callbacks if isinstance(c, ProgressTracker))
    loader = model.loader if isinstance(model, _BuildsItsLoader) else train
    return Outcome(model.seen, weights(model), tracker.state_dict()["progress"], loader, oracle.disagreements)


_reference: dict[str, Outcome] = {}


def _straight(config: str) -> Outcome:
    if config not in _reference:
        _reference[config] = _fit(config, seed=0)
    return _reference[config]


def _assert_resumes_exactly(config: str, at: int, tmp_path: Path) -> None:
    straight = _straight(re.sub("-(kill-in-validation|kill-at-epoch-end|kill-at-batch-start|killer-first)", "", config))
    path = tmp_path / "mid.ckpt"
    first = _fit(config, seed=0, kill_at=at, path=path)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InexactResumeWarning)
        resumed = _fit(config, seed=1234, path=path)
    assert first.seen + resumed.seen == straight.seen
    assert all(torch.equal(a, b) for a, b in zip(resumed.weights, straight.weights))
    assert without_ledger(resumed.progress) == without_ledger(straight.progress)


@pytest.mark.parametrize("at", range(EPOCHS * BATCHES))
@pytest.mark.parametrize("config", ["stateful", "stateful-shuffle"])
def test_a_stateful_dataloader_resumes_exactly_from_every_batch(config: str, at: int, tmp_path: Path) -> None:
    _assert_resumes_exactly(config, at, tmp_path)


def test_a_stateful_dataloader_over_a_distributed_sampler_resumes_exactly_from_an_epochs_last_batch(
    tmp_path: Path,
) -> None:
    """Lightning builds the resumed iterator before its set_epoch: the adapter sets the next epoch first."""
    _assert_resumes_exactly("stateful-distributed", BATCHES - 1, tmp_path)


@pytest.mark.parametrize("at", [BATCHES - 1, EPOCHS * BATCHES - 1])
@pytest.mark.parametrize(
    "config",
    [
        "plain",
        "plain-shuffle",
        "plain-shuffle-workers",
        "plain-stream",
        "plain-stream-workers",
    ],
)
def test_a_plain_dataloader_resumes_exactly_from_the_last_batch_of_an_epoch(
    config: str, at: int, tmp_path: Path
) -> None:
    _assert_resumes_exactly(config, at, tmp_path)


def _assert_plain_epoch_read_from_its_start(config: str, at: int, tmp_path: Path) -> None:
    """A plain DataLoader saved inside an epoch: warned at the save and at the resume (naming torchdata's
    StatefulDataLoader); nothing is installed on it; Lightning reads the resumed epoch from its first batch, as many
    batches as that epoch has left, its counters (the oracle's) going on to the epoch's end."""
    base = re.sub("-(kill-in-validation|kill-at-epoch-end|kill-at-batch-start|killer-first)", "", config)
    straight = _straight(base)
    path = tmp_path / "mid.ckpt"
    with pytest.warns(InexactResumeWarning, match="saving DataLoader over Indexed.*StatefulDataLoader"):
        first = _fit(config, seed=0, kill_at=at, path=path)
    with pytest.warns(InexactResumeWarning, match="resuming DataLoader over Indexed.*StatefulDataLoader"):
        resumed = _fit(config, seed=1234, path=path)
    left = BATCHES - len(first.seen) % BATCHES  # the batches of the cut epoch Lightning runs after the resume
    epoch = straight.seen[:BATCHES]  # an unshuffled epoch's batches
    assert resumed.seen[:left] == epoch[:left]  # from the epoch's first batch, not from the cut one
    assert len(first.seen) + len(resumed.seen) == len(straight.seen)
    assert first.disagreements == resumed.disagreements == []
    for counts in ("batches", "epochs"):
        assert resumed.progress["stages"]["train"][counts] == straight.progress["stages"]["train"][counts]
    assert "_get_iterator" not in vars(resumed.loader)  # nothing installed: the loader's own methods
    assert type(resumed.loader.batch_sampler.sampler) is SequentialSampler


@pytest.mark.parametrize("at", [0, 1, BATCHES + 1])
@pytest.mark.parametrize("config", ["plain", "plain-kill-at-batch-start", "plain-kill-at-batch-start-killer-first"])
def test_a_plain_dataloader_saved_inside_an_epoch_warns_and_lightning_reads_that_epoch_from_its_start(
    config: str, at: int, tmp_path: Path
) -> None:
    """Saved at a batch's end, or at its start (Lightning fetched it; the tracker's hook after the saver's or
    before it)."""
    _assert_plain_epoch_read_from_its_start(config, at, tmp_path)


# check_val_every_n_epoch=2, saved in on_train_batch_end at epoch 0's last batch: Lightning's restart counts a
# validation of epoch 1 as run at its first batch, building the validation iterator (its base seed a global-RNG draw)
# where the uninterrupted run builds none
VALIDATES_NEXT = "stateful-shuffle-validate-every-2-epochs"


def test_a_resume_at_the_last_batch_of_an_epoch_before_a_validating_one_undoes_the_validation_iterators_draw(
    tmp_path: Path,
) -> None:
    _assert_resumes_exactly(VALIDATES_NEXT, BATCHES - 1, tmp_path)


@pytest.mark.parametrize("config", [f"{VALIDATES_NEXT}-noisy", f"{VALIDATES_NEXT}-persistent-validation"])
def test_a_validation_iterator_built_at_the_first_resumed_batch_is_warned_where_its_draw_cannot_be_undone(
    config: str, tmp_path: Path
) -> None:
    """noisy: the dataset draws from the global RNG as the batch is read (no workers), after that build;
    persistent-validation: the loader keeps that iterator (persistent workers), and its validation builds none."""
    straight = _straight(config)
    path = tmp_path / "end.ckpt"
    first = _fit(config, seed=0, kill_at=BATCHES - 1, path=path)
    fix = r"builds the validation dataloader's iterator there.*generator=torch\.Generator\(\)"
    with pytest.warns(InexactResumeWarning, match=fix):
        resumed = _fit(config, seed=1234, path=path)
    assert first.seen + resumed.seen == straight.seen  # the data resumes exactly, the random draws do not
    assert not all(torch.equal(a, b) for a, b in zip(resumed.weights, straight.weights, strict=True))


@pytest.mark.parametrize("at", range(BATCHES))
def test_checkpoint_inside_an_accumulation_window_resumes_exactly(at: int, tmp_path: Path) -> None:
    _assert_resumes_exactly("stateful-shuffle-accumulate", BATCHES + at, tmp_path)


@pytest.mark.parametrize("at", [1, BATCHES - 1, BATCHES + 2])
@pytest.mark.parametrize("config", ["stateful", "stateful-shuffle", "stateful-shuffle-workers"])
def test_stateful_and_multiprocess_loaders_resume_exactly(config: str, at: int, tmp_path: Path) -> None:
    _assert_resumes_exactly(config, at, tmp_path)


@pytest.mark.parametrize("at", [1, BATCHES - 1, BATCHES + 2])
@pytest.mark.parametrize("config", ["stateful-shuffle-in-module", "stateful-shuffle-workers-in-module"])
def test_a_shuffling_stateful_dataloader_built_in_train_dataloader_resumes_exactly(
    config: str, at: int, tmp_path: Path
) -> None:
    """Its sampler draws its seed from the global RNG when built: Lightning builds it after the load, the uninterrupted
    run before its checkpoint, so the tracker undoes that draw (silently)."""
    _assert_resumes_exactly(config, at, tmp_path)


@pytest.mark.parametrize("at", [1, BATCHES - 1, BATCHES + 2])
@pytest.mark.parametrize("config", ["stateful-sized-stream", "stateful-sized-stream-workers"])
def test_an_iterable_dataset_with_a_length_in_a_stateful_dataloader_resumes_exactly(
    config: str, at: int, tmp_path: Path
) -> None:
    _assert_resumes_exactly(config, at, tmp_path)


class _PlainAndStateful(Recording):
    """Trains on a combined batch of a plain loader ``"a"`` and a stateful one ``"b"``."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen.append([int(i) for i in batch["a"][2]] + [-1] + [int(i) for i in batch["b"][2]])
        return self.loss(batch["a"]) + self.loss(batch["b"])


def _fit_combined(mode: str, seed: int, kill_at: int | None = None, path: Path | None = None) -> Outcome:
    torch.manual_seed(seed)
    model = _PlainAndStateful()
    loaders = {
        "a": DataLoader(Indexed(10), batch_size=3, shuffle=True),
        "b": StatefulDataLoader(Indexed(7), batch_size=3, shuffle=True),
    }
    tracker = ProgressTracker()
    callbacks: list[pl.Callback] = [tracker]
    if kill_at is not None:
        assert path is not None
        callbacks.append(KillAfter(kill_at, path))
    with contextlib.suppress(Killed):
        trainer(callbacks, max_epochs=EPOCHS, limit_val_batches=0).fit(
            model, CombinedLoader(loaders, mode), ckpt_path=None if kill_at is not None else path
        )
    return Outcome(model.seen, weights(model), tracker.state_dict()["progress"])


def _stateful_part(ids: list[int]) -> list[int]:
    return ids[ids.index(-1) + 1 :]


@pytest.mark.parametrize("at", [1, 4])
@pytest.mark.parametrize("mode", ["max_size_cycle", "min_size"])
def test_a_plain_loader_beside_a_stateful_one_saved_inside_an_epoch_warns_and_the_stateful_one_goes_on_at_its_batch(
    mode: str, at: int, tmp_path: Path
) -> None:
    """Lightning restores the stateful loader "b" by its own state; the plain loader "a" has no position: warned at
    the save and at the resume, Lightning reads it from its first batch."""
    straight = _fit_combined(mode, seed=0)
    with pytest.warns(InexactResumeWarning, match="saving DataLoader over Indexed.*StatefulDataLoader"):
        first = _fit_combined(mode, seed=0, kill_at=at, path=tmp_path / "mid.ckpt")
    with pytest.warns(InexactResumeWarning, match="resuming DataLoader over Indexed.*StatefulDataLoader"):
        resumed = _fit_combined(mode, seed=1234, path=tmp_path / "mid.ckpt")
    assert _stateful_part(resumed.seen[0]) == _stateful_part(straight.seen[len(first.seen)])
    assert len(first.seen) + len(resumed.seen) == len(straight.seen)  # Lightning's counters end each epoch
    assert resumed.progress["stages"]["train"]["batches"] == straight.progress["stages"]["train"]["batches"]


def test_a_stateful_loader_without_a_length_warns_that_lightnings_own_restore_skips_the_prefetched_batch(
    tmp_path: Path,
) -> None:
    # A trade of Lightning restoring the loader's own state: it saved that state after the batch it prefetched.
    path = tmp_path / "mid.ckpt"
    first = _fit("stateful-stream", seed=0, kill_at=1, path=path)
    with pytest.warns(InexactResumeWarning, match="Lightning saved that state after the batch it had prefetched"):
        resumed = _fit("stateful-stream", seed=1234, path=path)
    assert first.seen + resumed.seen[:1] == [[0, 1, 2], [3, 4, 5], [9]]


@pytest.mark.parametrize(
    ("loader", "at"),  # validation batches: 0-2 mid-epoch (a plain loader: between epochs only), 3-5 at the epoch end
    [("stateful", 0), ("stateful", 2), ("stateful", 3), ("stateful", 5), ("plain", 3), ("plain", 5)],
)
def test_checkpoint_after_a_validation_batch_resumes_training_exactly_and_says_lightning_skips_the_rest(
    loader: str, at: int, tmp_path: Path
) -> None:
    straight = _straight(f"{loader}-shuffle-validate")
    path = tmp_path / "mid.ckpt"
    first = _fit(f"{loader}-shuffle-validate-kill-in-validation", seed=0, kill_at=at, path=path)
    with pytest.warns(InexactResumeWarning, match="without running the rest of that validation"):
        resumed = _fit(f"{loader}-shuffle-validate-kill-in-validation", seed=1234, path=path)
    assert first.seen + resumed.seen == straight.seen
    assert all(torch.equal(a, b) for a, b in zip(resumed.weights, straight.weights))
    assert resumed.progress["stages"]["train"] == straight.progress["stages"]["train"]
    validations = [run.progress["stages"]["validate"]["epochs"]["lifetime"] for run in (resumed, straight)]
    assert validations[0] == validations[1]  # Lightning counts the interrupted validation as finished
    batches = [run.progress["stages"]["validate"]["batches"]["lifetime"]["completed"] for run in (resumed, straight)]
    assert batches[0] == batches[1] - (2 - at % 3)  # the batches Lightning skipped are not counted
    assert "without running the rest of that validation" in resumed.progress["anomalies"][0]


def test_checkpoint_before_a_due_validation_says_lightning_will_skip_it(tmp_path: Path) -> None:
    with pytest.warns(InexactResumeWarning, match="skips that validation"):
        _fit("plain-validate", seed=0, kill_at=1, path=tmp_path / "mid.ckpt")


@pytest.mark.parametrize("at", [0, 1, BATCHES - 1, BATCHES + 2])
def test_checkpoint_of_an_exception_inside_a_training_step_of_a_plain_loader_warns_and_lightning_reads_that_epoch_again(
    at: int, tmp_path: Path
) -> None:
    """``OnExceptionCheckpoint`` after an exception in the step of batch ``at`` (an epoch's first or last one too):
    a plain DataLoader is warned at the save and at the resume; Lightning runs the cut batch again, reading the epoch
    from its first batch, its counters going on to the epoch's end."""
    straight = _straight("plain")
    torch.manual_seed(0)
    cut = Crashing(crash_at=at)
    saver = pl.callbacks.OnExceptionCheckpoint(dirpath=tmp_path, filename="cut")
    fit = trainer([ProgressTracker(), saver], max_epochs=EPOCHS, limit_val_batches=0, enable_checkpointing=True)
    with (
        pytest.warns(InexactResumeWarning, match="saving DataLoader over Indexed.*StatefulDataLoader"),
        pytest.raises(RuntimeError, match="crash"),
    ):
        fit.fit(cut, _loader("plain"))
    with pytest.warns(InexactResumeWarning, match="resuming DataLoader over Indexed.*StatefulDataLoader"):
        resumed = _fit("plain", seed=1234, path=tmp_path / "cut.ckpt")
    left = BATCHES - len(cut.seen) % BATCHES
    assert resumed.seen[:left] == straight.seen[:left]  # from the epoch's first batch (unshuffled)
    assert len(cut.seen) + len(resumed.seen) == len(straight.seen)
    assert resumed.disagreements == []
    assert resumed.progress["stages"]["train"]["batches"] == straight.progress["stages"]["train"]["batches"]


@pytest.mark.parametrize(
    "config", ["plain-shuffle", "plain-shuffle-validate", "stateful-shuffle", "stateful-shuffle-validate"]
)
def test_checkpoint_at_the_end_of_an_epoch_resumes_exactly(config: str, tmp_path: Path) -> None:
    _assert_resumes_exactly(config + "-kill-at-epoch-end", 0, tmp_path)


@pytest.mark.parametrize("at", [1, BATCHES - 1])
def test_checkpoint_taken_by_a_callback_running_before_the_tracker_resumes_exactly(at: int, tmp_path: Path) -> None:
    _assert_resumes_exactly("stateful-shuffle-accumulate-killer-first", at, tmp_path)


_SKIPPED = "train batch 1 of the epoch.*so the resumed epoch skips it"


def _cut_inside_step_of_batch_1(tmp_path: Path) -> Crashing:
    """A fit on a stateful loader whose step of batch 1 raises; ``OnExceptionCheckpoint`` writes ``cut.ckpt``."""
    torch.manual_seed(0)
    saver = pl.callbacks.OnExceptionCheckpoint(dirpath=tmp_path, filename="cut")
    fit = trainer([ProgressTracker(), saver], max_epochs=EPOCHS, limit_val_batches=0, enable_checkpointing=True)
    cut = Crashing(crash_at=1)
    with pytest.raises(RuntimeError, match="crash"):
        fit.fit(cut, _loader("stateful-shuffle"))
    return cut


def test_checkpoint_of_an_exception_inside_a_training_step_warns_that_a_stateful_loader_resumes_past_that_batch(
    tmp_path: Path,
) -> None:
    """Lightning saves a stateful loader's own state after the batch whose step raised, and restores it."""
    with pytest.warns(InexactResumeWarning, match=_SKIPPED):
        _cut_inside_step_of_batch_1(tmp_path)


def test_resuming_from_a_checkpoint_of_an_exception_inside_a_training_step_warns_that_a_stateful_loader_skips_it(
    tmp_path: Path,
) -> None:
    """The same trade, warned again when a fit resumes from that checkpoint (read from Lightning's saved loops)."""
    straight = _straight("stateful-shuffle")
    with pytest.warns(InexactResumeWarning):
        cut = _cut_inside_step_of_batch_1(tmp_path)
    with pytest.warns(InexactResumeWarning, match=_SKIPPED):
        resumed = _fit("stateful-shuffle", seed=1234, path=tmp_path / "cut.ckpt")
    assert cut.seen + resumed.seen[:1] == [straight.seen[0], straight.seen[2]]  # batch 1 skipped


def test_checkpoint_at_the_start_of_a_train_batch_warns_that_a_stateful_loader_resumes_past_that_batch(
    tmp_path: Path,
) -> None:
    """Lightning saves a stateful loader's own state after the batch it fetched for ``on_train_batch_start``."""
    with pytest.warns(InexactResumeWarning, match=_SKIPPED):
        _fit("stateful-shuffle-kill-at-batch-start", seed=0, kill_at=1, path=tmp_path / "mid.ckpt")


def test_resuming_from_a_checkpoint_at_the_start_of_a_train_batch_warns_that_a_stateful_loader_skips_it(
    tmp_path: Path,
) -> None:
    """The same trade, warned again at the resume: Lightning runs the epoch on from the batch after it."""
    straight = _straight("stateful-shuffle")
    with pytest.warns(InexactResumeWarning):
        first = _fit("stateful-shuffle-kill-at-batch-start", seed=0, kill_at=1, path=tmp_path / "mid.ckpt")
    with pytest.warns(InexactResumeWarning, match=_SKIPPED):
        resumed = _fit("stateful-shuffle-kill-at-batch-start", seed=1234, path=tmp_path / "mid.ckpt")
    assert first.seen + resumed.seen[:1] == [straight.seen[0], straight.seen[2]]  # batch 1 skipped
