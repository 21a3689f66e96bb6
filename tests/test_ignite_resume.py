"""Exact mid-epoch resume of a real Ignite trainer, without DeterministicEngine.

Per configuration one uninterrupted reference run (3 epochs of 4 batches, the last of
1 sample; validation after every epoch) saves a ``Checkpoint`` after every iteration.
Each test loads one of them into fresh objects (new Engine, model, optimizer, DataLoader)
with ``Checkpoint.load_objects`` (``weights_only=True``), runs to the end, and compares
with the reference: weights ``torch.equal``, the sample ids of every remaining step, and
the full progress state.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ignite")
pytest.importorskip("torchdata")

import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint, DiskSaver
from torch.utils.data import BatchSampler, DistributedSampler, RandomSampler
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import InexactResumeWarning, ProgressStateError

from helpers.ignite_oracle import Oracle
from helpers.ignite_program import TRAIN_SIZE, Config, Indexed, Program, build, resume, save_every_iteration
from helpers.ledger import without_ledger

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")

ALL = tuple(range(1, 12))  # every iteration before the run's last; 4 and 8 end an epoch
EPOCH_2 = (5, 6, 7, 8)
_references: dict[Config, tuple[Program, Path]] = {}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ignite_checkpoints")


def _reference(config: Config, folder: Path) -> tuple[Program, Path]:
    if config not in _references:
        where = folder / str(abs(hash(config)))
        program = build(config, seed=0)
        save_every_iteration(program, where)
        with warnings.catch_warnings():  # a plain loader's mid-epoch saves warn (their own test asserts it)
            warnings.simplefilter("ignore", InexactResumeWarning)
            program.run()
        _references[config] = (program, where)
    return _references[config]


def _assert_same(resumed: Program, reference: Program, iteration: int) -> None:
    for name, weight in reference.weights().items():
        assert torch.equal(resumed.weights()[name], weight), name
    assert resumed.seen == reference.seen[iteration:]
    assert without_ledger(resumed.progress.view.state_dict()) == without_ledger(reference.progress.view.state_dict())
    assert resumed.trainer.state.epoch == reference.trainer.state.epoch
    assert resumed.trainer.state.iteration == reference.trainer.state.iteration


# Exact at every batch: a StatefulDataLoader, positioned by its own state.
CASES = [
    *[pytest.param(Config(stateful=True), i, id=f"stateful-{i}") for i in ALL],
    *[pytest.param(Config(stateful=True, shuffle=False), i, id=f"stateful-ordered-{i}") for i in ALL],
    *[pytest.param(Config(stateful=True, accumulation=3), i, id=f"stateful-accumulate3-{i}") for i in ALL],
    *[pytest.param(Config(stateful=True, workers=2), i, id=f"stateful-workers2-{i}") for i in (6, 8)],
    *[pytest.param(Config(stateful=True, iterable=True), i, id=f"stateful-iterable-{i}") for i in EPOCH_2],
    *[
        pytest.param(Config(stateful=True, iterable=True, workers=2), i, id=f"stateful-iterable-workers2-{i}")
        for i in (7,)
    ],
]
# Exact between epochs: a plain DataLoader, positioned by nothing, its generators saved (4 and 8 end an epoch).
EPOCH_ENDS = [
    *[pytest.param(Config(), i, id=f"shuffle-{i}") for i in (4, 8)],
    *[pytest.param(Config(shuffle=False), i, id=f"ordered-{i}") for i in (4, 8)],
    *[pytest.param(Config(accumulation=3), i, id=f"accumulate3-{i}") for i in (4, 8)],
    *[pytest.param(Config(workers=2), i, id=f"workers2-{i}") for i in (8,)],
    *[pytest.param(Config(iterable=True), i, id=f"iterable-{i}") for i in (8,)],
    *[pytest.param(Config(iterable=True, workers=2), i, id=f"iterable-workers2-{i}") for i in (4,)],
]


@pytest.mark.filterwarnings("error::tracker_core.InexactResumeWarning")
@pytest.mark.parametrize(("config", "iteration"), CASES)
def test_resume_of_a_stateful_dataloader_after_any_iteration_matches_the_uninterrupted_run(
    config: Config, iteration: int, folder: Path
) -> None:
    reference, where = _reference(config, folder)
    _assert_same(resume(config, where / f"{iteration}.pt"), reference, iteration)


@pytest.mark.filterwarnings("error::tracker_core.InexactResumeWarning")
@pytest.mark.parametrize(("config", "iteration"), EPOCH_ENDS)
def test_resume_of_a_plain_dataloader_at_an_epoch_end_matches_the_uninterrupted_run(
    config: Config, iteration: int, folder: Path
) -> None:
    reference, where = _reference(config, folder)
    _assert_same(resume(config, where / f"{iteration}.pt"), reference, iteration)


@pytest.mark.filterwarnings("ignore::tracker_core.InexactResumeWarning")
@pytest.mark.parametrize(("config", "iteration"), [(Config(iterable=True), 8), (Config(iterable=True, workers=2), 4)])
def test_a_plain_iterable_dataloader_resumed_at_its_epochs_last_iteration_is_exact(
    config: Config, iteration: int, folder: Path
) -> None:
    reference, where = _reference(config, folder)
    _assert_same(resume(config, where / f"{iteration}.pt"), reference, iteration)


@pytest.mark.parametrize("config", [Config(), Config(shuffle=False), Config(accumulation=3)], ids=str)
def test_a_plain_dataloader_saved_mid_epoch_warns_naming_the_stateful_dataloader(
    config: Config, tmp_path: Path
) -> None:
    program = build(config, seed=0)
    save_every_iteration(program, tmp_path)
    with pytest.warns(
        InexactResumeWarning, match=r"saving DataLoader .* after 2 batches of an epoch.*StatefulDataLoader"
    ):
        program.trainer.run(program.loader, max_epochs=1, epoch_length=2)


def _plain_resumed_with_oracle(config: Config, path: Path) -> tuple[Program, Oracle, list[str]]:
    """Fresh objects loaded from ``path`` and run with an Oracle; the messages of every warning of the load and run."""
    resumed = build(config, seed=1234)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", "'set_vital' is deprecated")
        Checkpoint.load_objects(resumed.to_save(), str(path))
        oracle = Oracle(resumed.progress, resumed.trainer, [resumed.optimizer], {"validate": resumed.evaluator})
        resumed.run()
    return resumed, oracle, [f"{w.category.__name__}: {w.message}" for w in caught]


@pytest.mark.parametrize("iteration", [1, 3, 5, 6, 7, 10, 11])
@pytest.mark.parametrize("config", [Config(), Config(accumulation=3)], ids=["shuffle", "accumulate3"])
def test_a_plain_dataloader_resumed_mid_epoch_follows_ignites_rule_and_its_counters(
    config: Config, iteration: int, folder: Path
) -> None:
    # Ignite's rule: _init_iter = iteration % epoch_length, a fresh iter(dataloader), the epoch completes after
    # epoch_length - k more iterations (read from the start of a new order); the record follows engine.state.
    reference, where = _reference(config, folder)
    k = iteration % len(reference.loader)
    resumed, oracle, caught = _plain_resumed_with_oracle(config, where / f"{iteration}.pt")
    (message,) = caught  # one warning (no RNG check's), and nothing raised inside a handler
    assert re.match(rf"InexactResumeWarning: resuming DataLoader .* after {k} batches of an epoch", message)
    assert "StatefulDataLoader" in message
    assert oracle.checks and oracle.disagreements == []
    assert len(resumed.seen) == len(reference.seen) - iteration  # k + (N - k) batches in the resumed epoch
    sizes = [len(ids) for ids in reference.seen[: len(reference.loader)]]  # 3, 3, 3, 1
    assert [len(ids) for ids in resumed.seen[: len(sizes) - k]] == sizes[: len(sizes) - k]  # from its first batch
    view = resumed.progress.view
    assert resumed.trainer.state.iteration == reference.trainer.state.iteration == view.train.batches.run.completed
    assert resumed.trainer.state.epoch == reference.trainer.state.epoch == view.train.epochs.run.completed
    assert view.train.batches.lifetime.completed == reference.progress.view.train.batches.lifetime.completed
    assert "_get_iterator" not in vars(resumed.loader)  # nothing installed on the loader
    assert type(resumed.loader.batch_sampler) is BatchSampler
    assert type(resumed.loader.batch_sampler.sampler) is RandomSampler


def test_checkpoint_in_an_unfinished_accumulation_window_carries_the_partial_gradients(folder: Path) -> None:
    _, where = _reference(Config(accumulation=3), folder)
    mid_window = torch.load(where / "5.pt", weights_only=True)["progress"]["gradients"]
    after_step = torch.load(where / "6.pt", weights_only=True)["progress"]["gradients"]
    assert len(mid_window) == 4 and all(isinstance(g, torch.Tensor) for g in mid_window)
    assert after_step == []


@pytest.mark.parametrize("gradients", [[], None, 0], ids=["none", "None", "zero"])
def test_a_mid_window_checkpoint_with_damaged_gradients_is_refused_naming_them_and_nothing_changes(
    gradients: Any, folder: Path, tmp_path: Path
) -> None:
    _, where = _reference(Config(accumulation=3), folder)
    saved = torch.load(where / "5.pt", weights_only=True)
    saved["progress"]["gradients"] = gradients
    torch.save(saved, tmp_path / "damaged.pt")
    resumed = build(Config(accumulation=3), seed=1)
    rng = torch.get_rng_state()
    with pytest.raises(ProgressStateError, match=r"^progress state 'gradients': "):
        Checkpoint.load_objects({"progress": resumed.progress}, str(tmp_path / "damaged.pt"))
    assert resumed.progress.view.train.batches.lifetime.completed == 0
    assert torch.equal(torch.get_rng_state(), rng)


def test_resume_from_the_runs_last_iteration_records_the_new_run_ignite_starts(folder: Path) -> None:
    reference, where = _reference(Config(), folder)
    resumed = resume(Config(), where / "12.pt")  # Ignite finds the state finished and trains anew
    view = resumed.progress.view
    assert len(resumed.seen) == len(reference.seen)
    assert view.run.counts.completed == 2
    assert view.train.batches.run.completed == 12
    assert view.train.batches.lifetime.completed == 24
    assert view.train.epochs.lifetime.completed == 5  # the first run's last epoch never completed


def test_resume_from_checkpoint_at_epoch_completed_matches_the_uninterrupted_run(tmp_path: Path) -> None:
    reference = build(Config(), seed=0)
    checkpoint = Checkpoint(
        reference.to_save(), DiskSaver(str(tmp_path), require_empty=False), filename_pattern="{name}.pt"
    )
    reference.trainer.add_event_handler(Events.EPOCH_COMPLETED(once=2), checkpoint)  # after the validation
    reference.run()
    _assert_same(resume(Config(), tmp_path / "checkpoint.pt"), reference, 8)


def test_a_stateful_loader_also_in_to_save_warns_at_a_resume_from_an_epoch_end(tmp_path: Path) -> None:
    # torchdata resumes a state saved between epochs drawing the global RNG otherwise: the handler's entry suffices.
    reference = build(Config(stateful=True), seed=0)
    to_save = {**reference.to_save(), "loader": reference.loader}
    checkpoint = Checkpoint(to_save, DiskSaver(str(tmp_path), require_empty=False), filename_pattern="{name}.pt")
    reference.trainer.add_event_handler(Events.EPOCH_COMPLETED(once=2), checkpoint)
    reference.run()
    resumed = build(Config(stateful=True), seed=1234)
    Checkpoint.load_objects({**resumed.to_save(), "loader": resumed.loader}, str(tmp_path / "checkpoint.pt"))
    with pytest.warns(InexactResumeWarning, match="train dataloader 0 had a state of its own loaded besides"):
        resumed.run()


def test_a_checkpoint_after_terminate_epoch_in_the_same_iteration_warns(tmp_path: Path) -> None:
    # The resume reads the rest of the epoch, which the run that stopped it skipped.
    program = build(Config(stateful=True), seed=0)
    program.trainer.add_event_handler(Events.ITERATION_COMPLETED(once=2), lambda engine: engine.terminate_epoch())
    checkpoint = Checkpoint(program.to_save(), DiskSaver(str(tmp_path), require_empty=False))
    program.trainer.add_event_handler(Events.ITERATION_COMPLETED(once=2), checkpoint)
    with pytest.warns(InexactResumeWarning, match="a checkpoint after terminate_epoch"):
        program.run()


def _resume_from_validation(event: Any, config: Config, tmp_path: Path) -> tuple[Program, Program]:
    """Checkpoint on the evaluator's ``event`` during the second validation; resume from it."""
    reference = build(config, seed=0)
    checkpoint = Checkpoint(
        reference.to_save(), DiskSaver(str(tmp_path), require_empty=False), n_saved=None, filename_pattern="{name}.pt"
    )

    def save_during_second_validation(evaluator: Engine) -> None:
        if reference.trainer.state.epoch == 2:
            checkpoint(evaluator)

    reference.evaluator.add_event_handler(event, save_during_second_validation)
    reference.run()
    resumed = build(config, seed=1234)
    Checkpoint.load_objects(resumed.to_save(), str(tmp_path / "checkpoint.pt"))
    resumed.run()
    return reference, resumed


def test_an_evaluator_continuing_its_loaded_state_mid_epoch_is_noted(tmp_path: Path) -> None:
    # An evaluator in to_save, saved inside its epoch: Ignite runs only its remaining batches next time.
    reference = build(Config(), seed=0)
    to_save = {**reference.to_save(), "evaluator": reference.evaluator}
    checkpoint = Checkpoint(to_save, DiskSaver(str(tmp_path), require_empty=False), filename_pattern="{name}.pt")
    reference.evaluator.add_event_handler(Events.ITERATION_COMPLETED(once=2), checkpoint)
    reference.run()
    resumed = build(Config(), seed=1234)
    Checkpoint.load_objects({**resumed.to_save(), "evaluator": resumed.evaluator}, str(tmp_path / "checkpoint.pt"))
    with pytest.warns(RuntimeWarning, match="the validate engine continues its loaded state at iteration 2"):
        resumed.run()


def test_resume_from_checkpoint_at_evaluator_completed_matches_the_uninterrupted_run(tmp_path: Path) -> None:
    reference, resumed = _resume_from_validation(Events.COMPLETED, Config(), tmp_path)
    _assert_same(resumed, reference, 8)


def test_resume_from_checkpoint_mid_validation_drops_the_unfinished_validation(tmp_path: Path) -> None:
    # Ignite does not run the trainer's EPOCH_COMPLETED again, so the interrupted validation is not redone.
    reference, resumed = _resume_from_validation(Events.ITERATION_COMPLETED(once=2), Config(), tmp_path)
    for name, weight in reference.weights().items():
        assert torch.equal(resumed.weights()[name], weight), name
    assert resumed.seen == reference.seen[8:]
    assert reference.progress.view.validate.epochs.lifetime.completed == 3
    assert resumed.progress.view.validate.epochs.lifetime.completed == 2


def test_mid_epoch_checkpoint_with_an_epoch_length_other_than_the_loaders_warns(tmp_path: Path) -> None:
    program = build(Config(), seed=0)
    saved: list[dict[str, Any]] = []
    save = lambda: saved.append(program.progress.state_dict())  # noqa: E731
    program.trainer.add_event_handler(Events.ITERATION_COMPLETED(once=2), save)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program.trainer.run(program.loader, max_epochs=1, epoch_length=3)
    assert saved and any("epoch_length" in str(w.message) for w in caught)


@pytest.mark.filterwarnings("error::tracker_core.InexactResumeWarning")
@pytest.mark.parametrize("epoch_length", [3, 6])  # shorter and longer than the loader's 4 batches
def test_a_stateful_dataloader_under_another_epoch_length_resumes_exactly_after_any_iteration_unwarned(
    epoch_length: int, tmp_path: Path
) -> None:
    reference = build(Config(stateful=True), seed=0)
    save_every_iteration(reference, tmp_path)
    reference.trainer.run(reference.loader, max_epochs=3, epoch_length=epoch_length)
    for iteration in range(1, 3 * epoch_length):  # past the loader's length inside an epoch of 6 too
        resumed = build(Config(stateful=True), seed=1234)
        Checkpoint.load_objects(resumed.to_save(), str(tmp_path / f"{iteration}.pt"))
        resumed.trainer.run(resumed.loader)
        _assert_same(resumed, reference, iteration)


def _epoch_end_save_warnings(epoch_length: int) -> list[str]:
    program = build(Config(stateful=True), seed=0)
    saved: list[dict[str, Any]] = []
    program.trainer.add_event_handler(
        Events.EPOCH_COMPLETED(once=1), lambda: saved.append(program.progress.state_dict())
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program.trainer.run(program.loader, max_epochs=2, epoch_length=epoch_length)
    assert saved
    return [str(w.message) for w in caught if issubclass(w.category, InexactResumeWarning)]


def test_a_checkpoint_at_an_epoch_end_inside_the_loaders_pass_warns() -> None:
    assert any("epoch_length (2)" in message for message in _epoch_end_save_warnings(epoch_length=2))  # 4 batches


def test_a_checkpoint_at_an_epoch_end_that_is_also_the_loaders_pass_end_does_not_warn() -> None:
    assert _epoch_end_save_warnings(epoch_length=8) == []  # two passes of the 4-batch loader


def _warnings_of_a_save(program: Program, save_at: Any, before: Callable[[], object], before_at: Any) -> list[str]:
    """The InexactResumeWarning messages of the run, ``before()`` called at ``before_at``, a state saved at ``save_at``."""
    saved: list[dict[str, Any]] = []
    program.trainer.add_event_handler(before_at, before)
    program.trainer.add_event_handler(save_at, lambda: saved.append(program.progress.state_dict()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        program.run()
    assert saved
    return [str(w.message) for w in caught if issubclass(w.category, InexactResumeWarning)]


def test_a_checkpoint_at_the_epoch_end_of_an_epoch_ended_by_terminate_epoch_warns() -> None:
    program = build(Config(stateful=True), seed=0)
    stop = lambda: program.trainer.terminate_epoch()  # noqa: E731 (Ignite would pass the engine to the method)
    messages = _warnings_of_a_save(program, Events.EPOCH_COMPLETED(once=2), stop, Events.ITERATION_COMPLETED(once=6))
    assert any("terminate_epoch()" in message for message in messages)


def test_a_checkpoint_in_an_epoch_whose_data_set_data_replaced_warns() -> None:
    config = Config(stateful=True)
    program = build(config, seed=0)
    switch = lambda: program.trainer.set_data(config.loader())  # noqa: E731
    messages = _warnings_of_a_save(
        program, Events.ITERATION_COMPLETED(once=7), switch, Events.ITERATION_COMPLETED(once=6)
    )
    assert any("set_data()" in message for message in messages)


def test_resume_from_a_checkpoint_saved_after_terminate_continues_the_cut_epoch_and_the_fit_run(
    tmp_path: Path,
) -> None:
    config = Config(stateful=True)  # the cut epoch continues at its batch
    reference = build(config, seed=0)
    reference.run()
    stopped = build(config, seed=0)
    stopped.trainer.add_event_handler(Events.ITERATION_COMPLETED(once=6), lambda: stopped.trainer.terminate())
    stopped.trainer.add_event_handler(
        Events.COMPLETED, Checkpoint(stopped.to_save(), DiskSaver(str(tmp_path)), filename_pattern="{name}.pt")
    )
    stopped.run()
    _assert_same(resume(config, tmp_path / "checkpoint.pt"), reference, 6)  # one fit run, as Ignite's state


def test_a_checkpoint_of_a_stateful_dataloader_at_iteration_started_warns_that_its_fetched_batch_is_not_trained(
    tmp_path: Path,
) -> None:
    # A trade: torchdata's state is taken after the batch Ignite fetched, whose step the checkpoint precedes.
    config = Config(stateful=True)
    reference = build(config, seed=0)
    checkpoint = Checkpoint(reference.to_save(), DiskSaver(str(tmp_path)), filename_pattern="{name}.pt")
    reference.trainer.add_event_handler(Events.ITERATION_STARTED(once=6), checkpoint)
    with pytest.warns(InexactResumeWarning, match="at ITERATION_STARTED .*saved after that batch.*ITERATION_COMPLETED"):
        reference.run()
    resumed = resume(config, tmp_path / "checkpoint.pt")
    assert resumed.seen[:2] == reference.seen[6:8]  # the epoch goes on after batch 6, which is not trained
    assert resumed.progress.view.train.batches.lifetime.completed == reference.trainer.state.iteration


# global RNG moved after the load ------------------------------------------------------------------
@pytest.mark.parametrize("iteration", [6, 8], ids=["mid-epoch", "epoch-end"])
def test_a_reseed_between_load_objects_and_run_warns_naming_the_cause(iteration: int, folder: Path) -> None:
    _, where = _reference(Config(), folder)
    resumed = build(Config(), seed=1234)
    Checkpoint.load_objects(resumed.to_save(), str(where / f"{iteration}.pt"))
    torch.manual_seed(0)  # what Ignite's own save/resume example does after loading
    with pytest.warns(InexactResumeWarning, match="changed between Checkpoint.load_objects and the trainer's run"):
        resumed.run()


def test_a_draw_in_an_epoch_started_handler_of_a_mid_epoch_resume_warns(folder: Path) -> None:
    config = Config(stateful=True)  # a plain loader's resumed epoch starts a new order: no draw to compare with
    _, where = _reference(config, folder)
    resumed = build(config, seed=1234)
    Checkpoint.load_objects(resumed.to_save(), str(where / "6.pt"))
    resumed.trainer.add_event_handler(Events.EPOCH_STARTED, lambda: torch.rand(1))  # not run mid-epoch before
    with pytest.warns(InexactResumeWarning, match="in a STARTED or EPOCH_STARTED handler"):
        resumed.run()


def _sharded(seed: int) -> Program:
    """A program whose StatefulDataLoader shuffles by a DistributedSampler: Ignite builds its resumed iterator."""
    program = build(Config(stateful=True), seed=seed)
    data = Indexed(TRAIN_SIZE)
    sampler = DistributedSampler(data, num_replicas=1, rank=0, shuffle=True, seed=0)
    program.loader = StatefulDataLoader(data, batch_size=3, sampler=sampler)
    program.trainer.add_event_handler(Events.EPOCH_STARTED, lambda e: sampler.set_epoch(e.state.epoch - 1))
    return program


def test_a_reseed_in_an_epoch_started_handler_of_a_distributed_sampler_mid_epoch_resume_is_kept_and_warned(
    tmp_path: Path,
) -> None:
    saved = _sharded(seed=0)
    checkpoint = Checkpoint(saved.to_save(), DiskSaver(str(tmp_path)), filename_pattern="{name}.pt")
    saved.trainer.add_event_handler(Events.ITERATION_COMPLETED(once=6), checkpoint)
    saved.run()
    resumed = _sharded(seed=1234)
    Checkpoint.load_objects(resumed.to_save(), str(tmp_path / "checkpoint.pt"))
    resumed.trainer.add_event_handler(Events.EPOCH_STARTED, lambda: torch.manual_seed(0))
    at_first_batch: list[torch.Tensor] = []
    resumed.trainer.add_event_handler(
        Events.ITERATION_STARTED(once=7), lambda: at_first_batch.append(torch.get_rng_state())
    )
    with pytest.warns(InexactResumeWarning, match="in a STARTED or EPOCH_STARTED handler"):
        resumed.run()
    assert torch.equal(at_first_batch[0], torch.manual_seed(0).get_state())  # the build's draws undone, the reseed not


@pytest.mark.parametrize("iteration", [6, 8], ids=["mid-epoch", "epoch-end"])
def test_a_stateful_dataloader_built_after_load_objects_warns_naming_it_and_the_fix(
    iteration: int, folder: Path
) -> None:
    config = Config(stateful=True)
    _, where = _reference(config, folder)
    resumed = build(config, seed=1234)
    Checkpoint.load_objects(resumed.to_save(), str(where / f"{iteration}.pt"))
    resumed.loader = config.loader()  # StatefulDataLoader(shuffle=True): its sampler draws a seed from the global RNG
    with pytest.warns(InexactResumeWarning, match="building its StatefulDataLoader after the load") as caught:
        resumed.run()
    (warning,) = [w for w in caught if w.category is InexactResumeWarning]  # one, naming the cause and the fix
    assert str(warning.message).endswith(
        "Build the train loader before Checkpoint.load_objects and draw nothing between it and run()"
    )


def test_ignite_state_continued_without_a_recorded_run_is_noted_as_such() -> None:
    program = build(Config(), seed=0)  # Ignite's state from a checkpoint that held no progress entry
    program.trainer.load_state_dict({"iteration": 5, "max_epochs": 3, "epoch_length": len(program.loader)})
    with pytest.warns(RuntimeWarning, match="of a run the record did not count: this fit run's counts start at 0"):
        program.run()
