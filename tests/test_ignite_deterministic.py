"""A ``ProgressHandler`` on Ignite's ``DeterministicEngine``: it counts every event there and leaves the positioning
of data and the reseeding on resume to the engine (docs/ignite.md, "DeterministicEngine").

The program is tests/helpers/ignite_deterministic.py (2 epochs of 4 batches, dropout). A DeterministicEngine's
checkpoint holds numpy RNG states, which ``Checkpoint.load_objects(path)`` (``weights_only=True``) refuses:
these tests load the file with ``torch.load(weights_only=False)`` and hand Ignite the dict.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ignite")

import torch
from ignite.engine import DeterministicEngine
from ignite.handlers import Checkpoint
from torch.utils.data import DataLoader

from tracker_core import InexactResumeWarning, ProgressStateError
from tracker_core.integrations.ignite import ProgressHandler

from helpers.ignite_deterministic import EPOCHS, Program, build
from helpers.ignite_oracle import Oracle
from helpers.ignite_program import save_every_iteration
from helpers.ledger import without_ledger

ITERATIONS = EPOCHS * 4


def _saved(path: Path) -> dict[str, Any]:
    saved: dict[str, Any] = torch.load(path, weights_only=False)
    return saved


def _straight(folder: Path, tracked: bool, shuffle: bool) -> Program:
    program = build(tracked, shuffle)
    save_every_iteration(program, folder)
    program.run()
    return program


def _resumed(path: Path, tracked: bool, shuffle: bool) -> Program:
    program = build(tracked, shuffle)
    Checkpoint.load_objects(program.to_save(), _saved(path))
    program.run()
    return program


def _same_weights(a: Program, b: Program) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.weights().values(), b.weights().values(), strict=True))


@pytest.fixture(scope="module")
def sequential(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Program]:
    """The uninterrupted tracked run over a sequential DataLoader, a checkpoint after every iteration."""
    folder = tmp_path_factory.mktemp("deterministic_sequential")
    return folder, _straight(folder, tracked=True, shuffle=False)


@pytest.fixture(scope="module")
def shuffled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Program]:
    """The uninterrupted shuffling run with and without the handler: their folders, and the tracked run."""
    tracked, untracked = tmp_path_factory.mktemp("shuffled_tracked"), tmp_path_factory.mktemp("shuffled_untracked")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InexactResumeWarning)
        program = _straight(tracked, tracked=True, shuffle=True)
    _straight(untracked, tracked=False, shuffle=True)
    return tracked, untracked, program


def test_the_counts_on_a_deterministic_engine_agree_with_its_own_counters() -> None:
    program = build(shuffle=True)
    assert program.progress is not None
    oracle = Oracle(program.progress, program.trainer, [program.optimizer])
    program.run()
    assert oracle.disagreements == [] and oracle.checks > 20
    assert program.progress.view.train.batches.run.completed == program.trainer.state.iteration == ITERATIONS


def test_a_run_with_the_handler_trains_as_the_deterministic_engine_does_alone(tmp_path: Path) -> None:
    untracked = _straight(tmp_path / "untracked", tracked=False, shuffle=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InexactResumeWarning)
        tracked = _straight(tmp_path / "tracked", tracked=True, shuffle=True)
    assert tracked.seen == untracked.seen and _same_weights(tracked, untracked)


@pytest.mark.parametrize("iteration", range(1, ITERATIONS))
def test_a_resume_after_any_iteration_ends_like_the_uninterrupted_run(
    sequential: tuple[Path, Program], iteration: int
) -> None:
    folder, straight = sequential
    resumed = _resumed(folder / f"{iteration}.pt", tracked=True, shuffle=False)
    assert resumed.seen == straight.seen[iteration:]
    assert _same_weights(resumed, straight)
    assert resumed.progress is not None and straight.progress is not None
    assert without_ledger(resumed.progress.view.state_dict()) == without_ledger(straight.progress.view.state_dict())


@pytest.mark.parametrize("iteration", range(1, ITERATIONS))
def test_a_shuffled_resume_trains_as_the_deterministic_engine_resumes_alone_and_its_progress_ends_as_uninterrupted(
    shuffled: tuple[Path, Path, Program], iteration: int
) -> None:
    tracked, untracked, straight = shuffled
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InexactResumeWarning)
        resumed = _resumed(tracked / f"{iteration}.pt", tracked=True, shuffle=True)
    alone = _resumed(untracked / f"{iteration}.pt", tracked=False, shuffle=True)
    assert resumed.seen == alone.seen and _same_weights(resumed, alone)
    assert resumed.progress is not None and straight.progress is not None
    assert without_ledger(resumed.progress.view.state_dict()) == without_ledger(straight.progress.view.state_dict())


def test_loading_the_handler_changes_no_global_rng(sequential: tuple[Path, Program]) -> None:
    folder, _ = sequential
    program = build(shuffle=False)
    before = torch.get_rng_state()
    assert program.progress is not None
    program.progress.load_state_dict(_saved(folder / "3.pt")["progress"])
    assert torch.equal(torch.get_rng_state(), before)
    assert program.progress.view.train.batches.lifetime.completed == 3


def test_mid_epoch_checkpoints_of_a_shuffling_loader_warn_once_that_the_engine_resumes_them_otherwise(
    tmp_path: Path,
) -> None:
    with pytest.warns(InexactResumeWarning, match="RandomSampler draws the epoch's order") as caught:
        _straight(tmp_path, tracked=True, shuffle=True)
    assert len([w for w in caught if issubclass(w.category, InexactResumeWarning)]) == 1


def test_checkpoints_of_a_sequential_loader_warn_of_nothing(tmp_path: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", InexactResumeWarning)
        _straight(tmp_path, tracked=True, shuffle=False)


def test_a_dataloader_given_with_a_deterministic_engine_is_refused_at_attach() -> None:
    program = build(tracked=False)
    with pytest.raises(ValueError, match="resumes at the saved world size only"):
        ProgressHandler().attach(program.trainer, optimizers=[program.optimizer], dataloader=program.loader)


def test_a_checkpoint_of_another_world_size_is_refused_naming_ranks_and_nothing_changes(
    sequential: tuple[Path, Program],
) -> None:
    folder, _ = sequential
    state = _saved(folder / "3.pt")["progress"]
    entry = state["progress_tracker"]
    two_ranks = {**state, "progress_tracker": {**entry, "ranks": [entry, entry]}}
    handler = ProgressHandler()
    handler.attach(DeterministicEngine(lambda engine, batch: None))
    with pytest.raises(ProgressStateError, match="saved by 2 processes, loading on 1") as raised:
        handler.load_state_dict(two_ranks)
    assert raised.value.key == "ranks"
    assert handler.view.train.batches.lifetime.completed == 0


class _WithoutDataset(DataLoader[Any]):
    """A DataLoader subclass that never calls ``DataLoader.__init__`` (no ``dataset``), as in Ignite's own tests."""

    def __init__(self, loader: DataLoader[Any], *args: Any, **kwargs: Any) -> None:  # no DataLoader.__init__
        self.loader = loader
        self.sampler = loader.sampler
        self.batch_sampler = loader.batch_sampler

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Any:
        return iter(self.loader)


def test_a_deterministic_engine_over_a_dataloader_subclass_without_a_dataset_is_counted() -> None:
    engine = DeterministicEngine(lambda engine, batch: None)
    handler = ProgressHandler()
    handler.attach(engine)
    engine.run(_WithoutDataset(DataLoader(torch.arange(8), batch_size=4)))
    assert handler.view.train.batches.run.completed == engine.state.iteration == 2
