"""What the Ignite handler counts on which event, on real Engines on CPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ignite")
pytest.importorskip("torchdata")

import torch
from ignite.engine import Engine, Events, create_supervised_trainer
from ignite.handlers import Checkpoint, DiskSaver
from torch.utils.data import DataLoader

import tracker_core
from tracker_core import PhaseCounts, ProgressStateError, ScopeCounts
from tracker_core.integrations.ignite import ProgressHandler

from helpers.ignite_program import BATCH, EPOCHS, TRAIN_SIZE, VAL_SIZE, Config, Indexed, build

PER_EPOCH = 4  # 10 samples, batch 3


def _loader() -> DataLoader[Any]:
    return DataLoader(Indexed(TRAIN_SIZE), batch_size=BATCH)


def _counting_engine(progress: ProgressHandler, stage: str = "train") -> Engine:
    engine = Engine(lambda engine, batch: None)
    progress.attach(engine, stage=stage)
    return engine


# train epochs and batches -------------------------------------------------------------
def test_train_counts_agree_with_the_engine_state_after_every_iteration() -> None:
    program = build(Config(), seed=0)
    view, state = program.progress.view, program.trainer.state
    checked: list[int] = []

    @program.trainer.on(Events.ITERATION_COMPLETED)
    def check() -> None:
        assert view.train.batches.run.completed == state.iteration
        assert view.batch_index == (state.iteration - 1) % PER_EPOCH
        assert view.epoch_index == state.epoch - 1
        assert view.train.epochs.run == PhaseCounts(state.epoch, state.epoch, state.epoch - 1, state.epoch - 1)
        checked.append(state.iteration)

    program.run()
    assert checked == list(range(1, EPOCHS * PER_EPOCH + 1))
    assert view.train.epochs.run == PhaseCounts(EPOCHS, EPOCHS, EPOCHS, EPOCHS)
    assert view.train.samples == ScopeCounts(TRAIN_SIZE, EPOCHS * TRAIN_SIZE, EPOCHS * TRAIN_SIZE)
    assert view.run.kind == "fit" and view.run.counts == PhaseCounts(1, 1, 1, 1)


def test_the_step_sees_its_batch_in_flight_and_iteration_completed_handlers_see_it_completed() -> None:
    progress = ProgressHandler()
    seen: list[tuple[str, PhaseCounts]] = []

    def step(engine: Engine, batch: Any) -> None:
        seen.append(("step", progress.view.train.batches.run))

    trainer = Engine(step)
    progress.attach(trainer)
    trainer.add_event_handler(
        Events.ITERATION_STARTED, lambda: seen.append(("started", progress.view.train.batches.run))
    )
    trainer.add_event_handler(
        Events.ITERATION_COMPLETED, lambda: seen.append(("done", progress.view.train.batches.run))
    )
    trainer.run(_loader(), max_epochs=1)
    assert seen[:6] == [
        ("started", PhaseCounts(1, 1, 0, 0)),
        ("step", PhaseCounts(1, 1, 0, 0)),
        ("done", PhaseCounts(1, 1, 1, 1)),
        ("started", PhaseCounts(2, 2, 1, 1)),
        ("step", PhaseCounts(2, 2, 1, 1)),
        ("done", PhaseCounts(2, 2, 2, 2)),
    ]


def test_get_progress_of_the_trainer_and_of_an_evaluator_is_the_same_record() -> None:
    program = build(Config(), seed=0)
    program.run()
    assert tracker_core.get_progress(program.trainer).state_dict() == program.progress.view.state_dict()
    assert tracker_core.get_progress(program.evaluator).train.batches.lifetime.completed == EPOCHS * PER_EPOCH


# evaluators -----------------------------------------------------------------------------
def test_evaluator_runs_during_fit_are_validate_epochs_whose_counts_survive_ignites_reset() -> None:
    program = build(Config(), seed=0)
    program.run()
    validate = program.progress.view.validate
    assert program.evaluator.state.iteration == 3  # Ignite's own count restarts every run()
    assert validate.epochs.run == PhaseCounts(EPOCHS, EPOCHS, EPOCHS, EPOCHS)
    assert validate.batches.run.completed == EPOCHS * 3
    assert validate.batches.epoch.completed == 3
    assert validate.samples == ScopeCounts(VAL_SIZE, EPOCHS * VAL_SIZE, EPOCHS * VAL_SIZE)
    assert program.progress.view.run.counts == PhaseCounts(1, 1, 1, 1)  # all inside the one fit run


def test_an_evaluator_run_on_its_own_before_fit_leaves_the_fit_run_whole_when_fit_runs_it_again() -> None:
    program = build(Config(), seed=0)
    program.evaluator.run(DataLoader(Indexed(VAL_SIZE, seed=1), batch_size=2))  # a sanity check before training
    view, state = program.progress.view, program.trainer.state

    @program.trainer.on(Events.EPOCH_COMPLETED)
    def check() -> None:
        assert view.run.kind == "fit" and view.run.counts.in_flight
        assert view.train.batches.run.completed == state.iteration

    program.run()
    assert view.run.counts == PhaseCounts(2, 2, 2, 2)
    assert [run["kind"] for run in view.state_dict()["ledger"]["runs"]] == ["validate", "fit"]
    assert view.validate.epochs.lifetime.completed == EPOCHS + 1
    assert view.anomalies == ()


def test_an_evaluator_run_outside_fit_is_a_run_of_its_stage_and_lifetime_counts_carry_over() -> None:
    progress = ProgressHandler()
    tester = _counting_engine(progress, "test")
    tester.run(_loader())
    tester.run(_loader())
    view = progress.view
    assert view.run.kind == "test" and view.run.counts == PhaseCounts(2, 2, 2, 2)
    assert view.test.batches.run.completed == PER_EPOCH
    assert view.test.batches.lifetime.completed == 2 * PER_EPOCH
    assert view.test.epochs.lifetime.completed == 2


def test_an_inference_engine_counts_predict_samples() -> None:
    progress = ProgressHandler()
    predictor = _counting_engine(progress, "predict")
    predictor.run(_loader())
    assert progress.view.run.kind == "predict"
    assert progress.view.predict.samples.run == TRAIN_SIZE
    assert tracker_core.get_progress(predictor).predict.batches.run.completed == PER_EPOCH


# optimizer steps --------------------------------------------------------------------------
def test_gradient_accumulation_steps_follow_the_global_iteration_across_epochs() -> None:
    program = build(Config(accumulation=3), seed=0)
    view, state = program.progress.view, program.trainer.state
    seen: list[tuple[int, int]] = []

    @program.trainer.on(Events.ITERATION_COMPLETED)
    def check() -> None:
        seen.append((view.global_step, view.train.accumulating_batches))
        assert view.global_step == state.iteration // 3
        assert view.is_mid_accumulation == (state.iteration % 3 != 0)

    program.run()
    assert seen[3] == (1, 1)  # epoch 2's first batch continues the window that epoch 1 began
    assert view.train.optimizer_steps.run == EPOCHS * PER_EPOCH // 3


def test_two_optimizers_in_a_custom_update_function_are_counted_separately() -> None:
    generator, critic = torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)
    opt_g = torch.optim.SGD(generator.parameters(), lr=0.1)
    opt_c = torch.optim.SGD(critic.parameters(), lr=0.1)

    def update(engine: Engine, batch: Any) -> None:
        critic(batch[0]).sum().backward()
        opt_c.step()
        opt_c.zero_grad()
        if engine.state.iteration % 2 == 0:
            generator(batch[0]).sum().backward()
            opt_g.step()
            opt_g.zero_grad()

    trainer = Engine(update)
    progress = ProgressHandler()
    progress.attach(trainer, optimizers=[opt_g, opt_c])
    trainer.run(_loader(), max_epochs=2)
    steps = progress.view.train.optimizer_steps_by_optimizer
    assert [s.run for s in steps] == [PER_EPOCH, 2 * PER_EPOCH]
    assert progress.view.global_step == 3 * PER_EPOCH


def _amp_update(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler, overflow_at: set[int]
) -> Any:
    """An AMP update whose loss is infinite at the iterations in ``overflow_at``: the scaler skips those steps."""

    def update(engine: Engine, batch: Any) -> None:
        loss = model(batch[0]).sum()
        if engine.state.iteration in overflow_at:
            loss = loss * float("inf")
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()

    return update


def test_steps_an_amp_grad_scaler_skips_are_counted_as_skipped_not_as_steps() -> None:
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    trainer = Engine(_amp_update(model, optimizer, scaler, overflow_at={2, 5}))
    progress = ProgressHandler()
    progress.attach(trainer, optimizers=[optimizer], scaler=scaler)
    trainer.run(_loader(), max_epochs=2)
    assert progress.view.train.optimizer_steps.run == 2 * PER_EPOCH - 2
    assert progress.view.train.optimizer_steps_skipped.run == 2


def test_the_scaler_create_supervised_trainer_keeps_on_the_engine_state_is_found_by_itself() -> None:
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    trainer = Engine(_amp_update(model, optimizer, scaler, overflow_at={3}))
    setattr(trainer.state, "scaler", scaler)  # noqa: B010 - what create_supervised_trainer(scaler=True) does
    progress = ProgressHandler()
    progress.attach(trainer, optimizers=[optimizer])
    trainer.run(_loader(), max_epochs=1)
    assert progress.view.train.optimizer_steps_skipped.run == 1
    assert progress.view.train.optimizer_steps.run == PER_EPOCH - 1


def test_optimizers_are_counted_on_the_train_engine_only() -> None:
    with pytest.raises(ValueError, match="train engine only"):
        ProgressHandler().attach(Engine(lambda e, b: None), "validate", [torch.optim.SGD([torch.zeros(1)], lr=1)])


# terminate ----------------------------------------------------------------------------------
def test_terminate_epoch_mid_epoch_processes_the_epoch_early() -> None:
    progress = ProgressHandler()
    trainer = _counting_engine(progress)
    trainer.add_event_handler(Events.ITERATION_COMPLETED(once=2), lambda: trainer.terminate_epoch())
    trainer.run(_loader(), max_epochs=2)
    view = progress.view
    assert view.train.epochs.run == PhaseCounts(2, 2, 2, 2) == (trainer.state.epoch,) * 4
    assert view.train.batches.run.completed == 2 + PER_EPOCH == trainer.state.iteration


def test_terminate_epoch_skipping_epoch_completed_still_completes_the_epoch() -> None:
    progress = ProgressHandler()
    trainer = _counting_engine(progress)
    trainer.add_event_handler(
        Events.ITERATION_COMPLETED(once=2), lambda: trainer.terminate_epoch(skip_epoch_completed=True)
    )
    trainer.run(_loader(), max_epochs=2)
    assert progress.view.train.epochs.run == PhaseCounts(2, 2, 2, 2)


def test_terminate_mid_epoch_ends_the_run_with_the_epoch_unfinished() -> None:
    progress = ProgressHandler()
    trainer = _counting_engine(progress)
    trainer.add_event_handler(Events.ITERATION_COMPLETED(once=6), lambda: trainer.terminate())
    trainer.run(_loader(), max_epochs=3)
    view = progress.view
    assert view.run.counts == PhaseCounts(1, 1, 1, 1)
    assert view.train.epochs.run == PhaseCounts(2, 2, 1, 1)
    assert view.is_mid_epoch and view.train.batches.epoch.completed == 2


def test_running_again_after_terminate_continues_the_fit_run_and_closes_the_cut_epoch_as_ignite_moves_on() -> None:
    progress = ProgressHandler()
    trainer = _counting_engine(progress)
    trainer.add_event_handler(Events.ITERATION_COMPLETED(once=6), lambda: trainer.terminate())
    trainer.run(_loader(), max_epochs=3)
    trainer.run()  # Ignite continues its state: epoch 3 from its first batch
    view = progress.view
    assert view.train.epochs.run == PhaseCounts(3, 3, 3, 3) == (trainer.state.epoch,) * 4
    assert view.train.batches.run.completed == 6 + PER_EPOCH == trainer.state.iteration
    assert view.run.counts == PhaseCounts(1, 1, 1, 1)  # the fit run is Ignite's state


def test_terminate_skipping_completed_still_completes_the_run() -> None:
    progress = ProgressHandler()
    trainer = _counting_engine(progress)
    trainer.add_event_handler(Events.ITERATION_COMPLETED(once=3), lambda: trainer.terminate(skip_completed=True))
    trainer.run(_loader())
    assert progress.view.run.counts == PhaseCounts(1, 1, 1, 1)


def test_terminate_from_iteration_started_undoes_the_batch_that_never_ran() -> None:
    progress = ProgressHandler()
    trainer = _counting_engine(progress)
    trainer.add_event_handler(Events.ITERATION_STARTED(once=3), lambda: trainer.terminate())
    trainer.run(_loader())
    assert progress.view.train.batches.run == PhaseCounts(2, 2, 2, 2)
    assert progress.view.run.counts == PhaseCounts(1, 1, 1, 1)


# loading ---------------------------------------------------------------------------------
def _saved_mid_epoch(tmp_path: Path) -> Path:
    program = build(Config(), seed=0)
    checkpoint = Checkpoint(
        program.to_save(), DiskSaver(str(tmp_path), require_empty=False), filename_pattern="{name}.pt"
    )
    program.trainer.add_event_handler(Events.ITERATION_COMPLETED(once=6), checkpoint)
    program.run()
    return tmp_path / "checkpoint.pt"


def test_started_and_epoch_started_fired_again_on_resume_count_nothing(tmp_path: Path) -> None:
    resumed = build(Config(), seed=1)
    Checkpoint.load_objects(resumed.to_save(), str(_saved_mid_epoch(tmp_path)))
    view = resumed.progress.view
    checked: list[int] = []

    @resumed.trainer.on(Events.EPOCH_STARTED(once=2))
    def check() -> None:
        assert view.run.counts == PhaseCounts(1, 1, 0, 0)
        assert view.train.epochs.lifetime == PhaseCounts(2, 2, 1, 1)
        assert view.train.batches.epoch.completed == 2
        checked.append(1)

    resumed.run()
    assert checked == [1]


def test_bad_progress_state_in_a_checkpoint_raises_before_the_run_starts(tmp_path: Path) -> None:
    path = _saved_mid_epoch(tmp_path)
    saved = torch.load(path, weights_only=True)
    saved["progress"]["progress_tracker"]["progress"]["stages"]["train"]["batches"]["lifetime"]["completed"] = -1
    torch.save(saved, path)
    resumed = build(Config(), seed=1)
    with pytest.raises(ProgressStateError, match=r"progress\.stages\.train\.batches"):
        Checkpoint.load_objects(resumed.to_save(), str(path))
    assert resumed.progress.view.train.batches.lifetime.completed == 0


def test_checkpoint_without_the_progress_entry_raises_naming_the_key() -> None:
    with pytest.raises(ProgressStateError, match="progress_tracker"):
        ProgressHandler().load_state_dict({"gradients": []})


def test_two_trainers_sharing_an_optimizer_each_count_only_their_own_steps() -> None:
    # A warm-up trainer, then the main one, on one model and optimizer, each with its own handler.
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader([(torch.zeros(4), torch.zeros(1))] * 6, batch_size=2)
    handlers = [ProgressHandler(), ProgressHandler()]
    trainers = [create_supervised_trainer(model, optimizer, torch.nn.MSELoss()) for _ in handlers]
    for handler, trainer in zip(handlers, trainers, strict=True):
        handler.attach(trainer, optimizers=[optimizer])
    trainers[0].run(loader, max_epochs=1)
    trainers[1].run(loader, max_epochs=2)
    assert [handler.view.global_step for handler in handlers] == [3, 6]


def test_saved_partial_gradients_need_the_optimizers_attached_before_loading() -> None:
    with pytest.raises(ProgressStateError, match="attach the trainer"):
        ProgressHandler().load_state_dict({"progress_tracker": {}, "gradients": [torch.zeros(1)]})


def test_a_second_trainer_cannot_attach() -> None:
    progress = ProgressHandler()
    _counting_engine(progress)
    with pytest.raises(ValueError, match="already attached"):
        _counting_engine(progress)


@pytest.mark.parametrize(("first", "second"), [("validate", "test"), ("train", "validate"), ("test", "test")])
def test_an_engine_attached_again_is_refused_naming_its_stage(first: str, second: str) -> None:
    progress = ProgressHandler()
    engine = _counting_engine(progress, first)
    with pytest.raises(ValueError, match=f"already attached to this ProgressHandler, as '{first}'"):
        progress.attach(engine, stage=second)


def test_create_supervised_trainer_is_tracked_without_user_changes() -> None:
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = create_supervised_trainer(
        model, optimizer, torch.nn.MSELoss(), prepare_batch=lambda b, device, non_blocking: (b[0], b[1])
    )
    ProgressHandler().attach(trainer, optimizers=[optimizer])
    trainer.run(_loader(), max_epochs=2)
    assert tracker_core.get_progress(trainer).global_step == 2 * PER_EPOCH == trainer.state.iteration


# AMP -----------------------------------------------------------------------------------
def test_a_step_the_grad_scaler_skips_is_counted_apart_in_its_iteration() -> None:
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")

    def step(engine: Engine, batch: Any) -> None:
        overflow = float("inf") if engine.state.iteration == 2 else 1.0
        optimizer.zero_grad()
        scaler.scale(model(torch.ones(2, 4)).sum() * overflow).backward()
        scaler.step(optimizer)
        scaler.update()

    trainer = Engine(step)
    progress = ProgressHandler()
    progress.attach(trainer, optimizers=[optimizer], scaler=scaler)
    seen = []
    trainer.add_event_handler(
        Events.ITERATION_COMPLETED, lambda _: seen.append(progress.view.train.optimizer_steps_skipped.lifetime)
    )
    trainer.run([0] * 4, max_epochs=1)
    assert seen == [0, 1, 1, 1]
    assert progress.view.train.optimizer_steps.lifetime == 3
