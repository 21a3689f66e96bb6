"""AcceleratorProgress is a passenger (issue 13): with a real Accelerator(cpu=True) it pickles, survives an
exception in a loop and a break, is registered for checkpointing, never raises on an unexpected loop
order, and leaves no footprint: a run with it trains bit-identically to the same run without it."""

from __future__ import annotations

import copy
import pickle
import warnings
from pathlib import Path

import pytest

pytest.importorskip("accelerate")

import torch
from torch.utils.data import DataLoader

import tracker_core
from tracker_core import PhaseCounts
from tracker_core.integrations.accelerate import AcceleratorProgress

from helpers.accelerate_drive import Indexed, Setup, fresh_accelerator
from helpers.accelerate_oracle import Config, Stop, run

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")


def _prepared(
    samples: int = 10, accumulation: int = 2, stateful: bool = False
) -> tuple[object, object, object, object]:
    accelerator = fresh_accelerator(Setup(accumulation=accumulation, stateful=stateful))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    model, optimizer, loader = accelerator.prepare(
        model, torch.optim.SGD(model.parameters(), lr=0.1), DataLoader(Indexed(samples), batch_size=3, shuffle=True)
    )
    return accelerator, model, optimizer, loader


def _step(accelerator, model, optimizer, x, y) -> None:
    with accelerator.accumulate(model):
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()


def _train_epochs(progress, accelerator, model, optimizer, loader, epochs: int) -> None:
    with progress.fit(epochs) as fit:
        for _epoch in fit.epochs():
            for _ids, x, y in progress.train(loader):
                _step(accelerator, model, optimizer, x, y)


# pickling -------------------------------------------------------------------------------------------
def test_an_accelerator_holding_a_progress_pickles_and_the_copy_keeps_counting() -> None:
    accelerator, model, optimizer, loader = _prepared()
    progress = AcceleratorProgress(accelerator)
    _train_epochs(progress, accelerator, model, optimizer, loader, 1)
    copied = pickle.loads(pickle.dumps(accelerator))
    view = tracker_core.get_progress(copied)
    assert view.state_dict() == progress.view.state_dict()
    assert view.train.batches.lifetime == PhaseCounts(4, 4, 4, 4)


def test_a_progress_pickled_with_its_accelerator_continues_its_run_in_the_copy() -> None:
    accelerator, model, optimizer, loader = _prepared()
    progress = AcceleratorProgress(accelerator)
    _train_epochs(progress, accelerator, model, optimizer, loader, 1)
    copied = pickle.loads(pickle.dumps((progress, accelerator, model, optimizer, loader)))
    progress2, accelerator2, model2, optimizer2, loader2 = copied
    real_steps = []
    optimizer2.optimizer.register_step_post_hook(lambda *_: real_steps.append(1))
    _train_epochs(progress2, accelerator2, model2, optimizer2, loader2, 1)
    assert progress2.view.train.batches.lifetime.completed == 8
    assert progress2.view.train.optimizer_steps.epoch == len(real_steps) > 0  # the copy's optimizer is counted
    assert progress.view.train.batches.lifetime.completed == 4


def test_a_deep_copy_of_the_accelerator_carries_the_progress() -> None:
    accelerator, model, optimizer, loader = _prepared()
    progress = AcceleratorProgress(accelerator)
    _train_epochs(progress, accelerator, model, optimizer, loader, 1)
    copied = copy.deepcopy(accelerator)
    assert tracker_core.get_progress(copied).state_dict() == progress.view.state_dict()


# exceptions and breaks -----------------------------------------------------------------------------
def test_an_exception_in_a_train_step_then_a_new_epochs_loop_trains_every_epoch() -> None:
    accelerator, model, optimizer, loader = _prepared()
    progress = AcceleratorProgress(accelerator)

    def fails_at_batch_2() -> None:
        with progress.fit(2) as fit:
            for _epoch in fit.epochs():
                for index, (_ids, x, y) in progress.train(loader, with_index=True):
                    if index == 2:
                        raise KeyError("a bad batch")
                    _step(accelerator, model, optimizer, x, y)

    with pytest.raises(KeyError):
        fails_at_batch_2()
    view = progress.view
    assert view.train.batches.lifetime == PhaseCounts(2, 2, 2, 2)  # the failed batch was not trained
    assert view.run.counts == PhaseCounts(1, 1, 1, 1)
    _train_epochs(progress, accelerator, model, optimizer, loader, 2)
    assert view.run.counts == PhaseCounts(2, 2, 2, 2)
    assert view.train.epochs.run == PhaseCounts(2, 2, 2, 2)
    assert view.train.batches.run.completed == 8
    assert view.anomalies == ()


def test_an_exception_caught_inside_an_epoch_lets_the_epoch_continue() -> None:
    accelerator, model, optimizer, loader = _prepared()
    val = accelerator.prepare(DataLoader(Indexed(7), batch_size=3))
    progress = AcceleratorProgress(accelerator)
    with progress.fit(2) as fit:
        for _epoch in fit.epochs():
            try:
                for index, (_ids, x, y) in progress.train(loader, with_index=True):
                    _step(accelerator, model, optimizer, x, y)
                    if index == 1:
                        raise ValueError("after the step")
            except ValueError:
                pass
            for _batch in progress.evaluate(val):
                pass
    view = progress.view
    assert view.train.batches.lifetime.completed == 4  # two per epoch, each trained
    assert view.validate.epochs.lifetime.completed == 2
    assert view.run.counts == PhaseCounts(1, 1, 1, 1)


def test_an_exception_inside_an_evaluation_ends_it_and_the_next_one_counts() -> None:
    accelerator, *_ = _prepared()
    val = accelerator.prepare(DataLoader(Indexed(7), batch_size=3))
    progress = AcceleratorProgress(accelerator)

    def fails_at_batch_1() -> None:
        for index, _batch in enumerate(progress.evaluate(val)):
            if index == 1:
                raise RuntimeError("metric failed")

    with pytest.raises(RuntimeError):
        fails_at_batch_1()
    assert list(progress.evaluate(val)) != []
    assert progress.view.validate.epochs.lifetime == PhaseCounts(2, 2, 2, 2)
    assert progress.view.run.counts == PhaseCounts(2, 2, 2, 2)


def test_breaking_after_the_step_counts_the_batch_and_before_it_does_not() -> None:
    accelerator, model, optimizer, loader = _prepared()
    progress = AcceleratorProgress(accelerator)
    with progress.fit(2) as fit:
        for _epoch in fit.epochs():
            for index, (_ids, x, y) in progress.train(loader, with_index=True):
                if progress.view.epoch_index == 1 and index == 1:
                    break  # before training it
                _step(accelerator, model, optimizer, x, y)
                if index == 1:
                    break  # after training it
    assert progress.view.train.batches.lifetime == PhaseCounts(3, 3, 3, 3)
    assert progress.view.train.epochs.lifetime.completed == 2


def test_breaking_out_of_the_epochs_loop_ends_the_run_and_a_new_one_begins() -> None:
    accelerator, model, optimizer, loader = _prepared()
    progress = AcceleratorProgress(accelerator)
    with progress.fit(5) as fit:
        for epoch in fit.epochs():
            for _ids, x, y in progress.train(loader):
                _step(accelerator, model, optimizer, x, y)
            if epoch == 1:
                break
    assert progress.view.run.counts == PhaseCounts(1, 1, 1, 1)
    with progress.fit(2) as again:
        assert list(again.epochs()) == [0, 1]
    assert progress.view.run.counts == PhaseCounts(2, 2, 2, 2)


def _two_passes_an_epoch(progress, accelerator, model, optimizer, loader, at_second_pass_batch_1) -> None:
    with progress.fit(2) as fit:
        for _epoch in fit.epochs():
            for second in (False, True):
                for n, (_ids, x, y) in enumerate(progress.train(loader)):
                    _step(accelerator, model, optimizer, x, y)
                    if second and n == 1 and at_second_pass_batch_1() is False:
                        return


def test_a_save_in_a_second_pass_over_a_stateful_loader_in_one_epoch_warns_and_training_goes_on(
    tmp_path: Path,
) -> None:
    accelerator, model, optimizer, loader = _prepared(accumulation=1, stateful=True)
    progress = AcceleratorProgress(accelerator)
    save = lambda: accelerator.save_state(str(tmp_path / "saved"))  # noqa: E731
    with pytest.warns(
        tracker_core.InexactResumeWarning, match="train dataloader.s. 0 began another pass in this epoch"
    ):
        _two_passes_an_epoch(progress, accelerator, model, optimizer, loader, save)
    assert progress.view.train.batches.lifetime.completed == 16


def test_leaving_the_fit_in_a_second_pass_over_a_stateful_loader_in_one_epoch_ends_the_run() -> None:
    accelerator, model, optimizer, loader = _prepared(accumulation=1, stateful=True)
    progress = AcceleratorProgress(accelerator)
    _two_passes_an_epoch(progress, accelerator, model, optimizer, loader, lambda: False)
    assert progress.view.train.batches.lifetime.completed == 6
    assert progress.view.run.counts == PhaseCounts(1, 1, 1, 1)


def test_a_fit_kept_open_is_ended_when_a_new_one_begins() -> None:
    accelerator, model, optimizer, loader = _prepared()
    progress = AcceleratorProgress(accelerator)
    kept = progress.fit(3)
    kept.__enter__()
    epochs = kept.epochs()
    next(epochs)
    batches = progress.train(loader)
    next(batches)
    _train_epochs(progress, accelerator, model, optimizer, loader, 1)
    assert progress.view.run.counts == PhaseCounts(2, 2, 2, 2)
    with pytest.warns(RuntimeWarning, match="outside an epoch"):
        assert list(batches) != []  # the old pass goes on yielding; it counts in no epoch
    (anomaly,) = progress.view.anomalies
    assert "outside an epoch" in anomaly
    epochs.close()  # the superseded fit changes nothing any more
    kept.__exit__(None, None, None)
    assert progress.view.run.counts == PhaseCounts(2, 2, 2, 2)


def test_a_train_pass_outside_epochs_yields_every_batch_notes_an_anomaly_and_warns_once() -> None:
    accelerator, *_ = _prepared()
    loader = accelerator.prepare(DataLoader(Indexed(10), batch_size=3))
    progress = AcceleratorProgress(accelerator)
    with pytest.warns(RuntimeWarning, match="outside an epoch") as caught:
        assert len(list(progress.train(loader))) == 4
    assert len(caught) == 1
    assert len(progress.view.anomalies) == 1
    assert progress.view.train.batches.lifetime.completed == 0


# register_for_checkpointing ------------------------------------------------------------------------
def test_the_registered_state_only_says_where_the_progress_is_saved() -> None:
    progress = AcceleratorProgress(fresh_accelerator(Setup()))
    assert progress.state_dict() == {"saved_by": "AcceleratorProgress", "file": "progress_tracker_{rank}.pt"}
    with pytest.raises(tracker_core.ProgressStateError):
        progress.load_state_dict({"progress": {}})


# no footprint ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "config",
    [
        Config(),
        Config(train_sizes=(10, 7), accumulation=3),
        Config(loader="seedable", epochs=3),
        Config(break_train=(0, 2), break_eval=(1, 1)),
        Config(raise_train=(1, 1)),
        Config(loader="stateful", epochs=2),
        Config(loader="stateful-own", epochs=2),
    ],
    ids=[
        "shuffled-dropout-validation",
        "two-loaders",
        "seedable-sampler",
        "breaks",
        "exception",
        "use-stateful-dataloader",
        "stateful-dataloader",
    ],
)
def test_a_run_with_the_adapter_trains_bit_identically_to_the_run_without_it(config: Config) -> None:
    tracked = run(config)
    plain = run(config, tracked=False)
    assert tracked.train == plain.train  # sample ids, accelerator.step, loader iteration, end_of_dataloader
    assert tracked.val == plain.val  # validation order and its random draws
    assert tracked.rng_draws == plain.rng_draws  # torch, random and numpy streams after the run
    assert all(torch.equal(a, b) for a, b in zip(tracked.weights, plain.weights, strict=True))
    assert tracked.disagreements == []


@pytest.mark.parametrize("n", [0, 2], ids=["first-batch", "last-batch"])
def test_an_evaluation_interrupted_by_a_checkpoint_draws_again_what_it_drew(n: int, tmp_path: Path) -> None:
    config = Config()
    reference = run(config)
    stopped = run(config, stop=Stop(0, n, during_eval=True), directory=str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("error", tracker_core.InexactResumeWarning)
        resumed = run(config, resume=True, directory=str(tmp_path), seed_value=5)
    assert stopped.val[: -(n + 1)] + resumed.val == reference.val
    assert resumed.rng_draws == reference.rng_draws
    assert all(torch.equal(a, b) for a, b in zip(resumed.weights, reference.weights, strict=True))


def test_a_save_after_the_train_loop_was_left_early_in_the_epoch_warns_naming_the_loader(tmp_path: Path) -> None:
    config = Config(break_train=(0, 2), loader="stateful-own")  # its resume continues the left pass
    with pytest.warns(tracker_core.InexactResumeWarning, match=r"left the pass of train dataloader\(s\) 0"):
        run(config, stop=Stop(0, 1, during_eval=True), directory=str(tmp_path))


def test_a_resume_of_a_save_after_the_train_loop_was_left_early_warns_naming_the_loader(tmp_path: Path) -> None:
    config = Config(break_train=(0, 2), loader="stateful-own")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", tracker_core.InexactResumeWarning)  # named at the save (the test above)
        run(config, stop=Stop(0, 1, during_eval=True), directory=str(tmp_path))
    left = r"load_state of a checkpoint saved after the loop left the pass of train dataloader\(s\) 0"
    with pytest.warns(tracker_core.InexactResumeWarning, match=left):
        run(config, resume=True, directory=str(tmp_path), seed_value=5)


def test_a_resume_of_a_save_after_the_train_loop_of_a_plain_loader_was_left_early_restarts_the_epoch(
    tmp_path: Path,
) -> None:
    config = Config(break_train=(0, 2))
    with pytest.warns(tracker_core.InexactResumeWarning, match="^saving .* after 2 batches of an epoch") as saved:
        stopped = run(config, stop=Stop(0, 1, during_eval=True), directory=str(tmp_path))
    assert not any("left the pass" in str(warning.message) for warning in saved)  # the pass is not continued
    with pytest.warns(tracker_core.InexactResumeWarning, match="^resuming .* after 2 batches of an epoch"):
        resumed = run(config, resume=True, directory=str(tmp_path), seed_value=5)
    epoch_0 = [batch for batch in resumed.train if batch[0] == 0]
    assert len(epoch_0) == len(stopped.train) == 3  # read again from its first batch, to the same break
    assert [batch[4] for batch in epoch_0] == [batch[4] for batch in stopped.train]  # Accelerate's pass counter too
    # The program's own count of passes it cut (saved with the checkpoint) counts the restarted pass twice.
    assert all("passes run to their end" in disagreement for disagreement in resumed.disagreements)


def test_a_list_of_batches_trains_and_is_counted_like_a_loader() -> None:
    accelerator, model, optimizer, loader = _prepared()
    progress = AcceleratorProgress(accelerator)
    batches = list(loader)  # an iterable that takes no weak reference
    _train_epochs(progress, accelerator, model, optimizer, batches, 2)
    assert progress.view.train.batches.lifetime == PhaseCounts(8, 8, 8, 8)
