"""A run stopped right after ``save_state`` and resumed by ``load_state`` in a fresh Accelerator is the
uninterrupted run: same final weights, same sample ids in the same order, same progress.

Each configuration's uninterrupted run is computed once. The resumed process seeds its global
RNGs differently, so identical dropout proves the RNG state was restored too.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("accelerate")
pytest.importorskip("torchdata")

import torch
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import InexactResumeWarning
from tracker_core.integrations.accelerate import AcceleratorProgress

from helpers import accelerate_drive
from helpers.accelerate_drive import Indexed, Result, Setup, StopAt, fresh_accelerator, run

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")

SETUPS = {
    "torchdata-shuffled": Setup(stateful=True, torchdata=True),
    "torchdata-sequential": Setup(shuffle=False, stateful=True, torchdata=True),
    "torchdata-shuffled-2-workers": Setup(num_workers=2, stateful=True, torchdata=True),
    "torchdata-accumulate-3-of-5": Setup(samples=13, accumulation=3, stateful=True, torchdata=True),
    "torchdata-never-prepared": Setup(stateful=True, torchdata=True, prepared=False),
    "shuffled": Setup(),
    "sequential": Setup(shuffle=False),
    "shuffled-2-workers": Setup(num_workers=2),
    "seedable-sampler": Setup(seedable=True),
    "stateful": Setup(stateful=True),
    "stateful-2-workers": Setup(stateful=True, num_workers=2),
    "iterable": Setup(iterable=True),
    "accumulate-3-of-5": Setup(samples=13, accumulation=3),
}
_references: dict[Setup, Result] = {}


def _reference(setup: Setup) -> Result:
    if setup not in _references:
        _references[setup] = run(setup)
    return _references[setup]


def _assert_resumes_exactly(setup: Setup, stop: StopAt, directory: Path, seed_value: int = 7) -> None:
    reference = _reference(setup)
    stopped = run(setup, stop=stop, save_dir=str(directory))
    resumed = run(setup, load_dir=str(directory), seed_value=seed_value)
    assert stopped.train_ids + resumed.train_ids == reference.train_ids
    assert all(torch.equal(a, b) for a, b in zip(resumed.weights, reference.weights, strict=True))
    assert resumed.state == reference.state


@pytest.mark.parametrize("batch", [4, 5, 6, 7], ids=lambda b: f"epoch1-batch{b - 4}")
@pytest.mark.parametrize("name", ["torchdata-shuffled", "torchdata-sequential", "torchdata-shuffled-2-workers"])
def test_save_state_after_any_train_batch_of_an_epoch_of_a_stateful_dataloader_resumes_exactly(name, batch, tmp_path):
    _assert_resumes_exactly(SETUPS[name], StopAt(batch), tmp_path)


@pytest.mark.parametrize("batch", [5, 6], ids=lambda b: f"epoch1-batch{b - 4}")
def test_a_stateful_dataloader_never_prepared_resumes_exactly_without_track_train_loader(batch, tmp_path):
    _assert_resumes_exactly(SETUPS["torchdata-never-prepared"], StopAt(batch), tmp_path)


@pytest.mark.parametrize("batch", [3, 7], ids=["epoch0", "epoch1"])
@pytest.mark.parametrize("name", ["shuffled", "sequential", "shuffled-2-workers", "accumulate-3-of-5"])
def test_save_state_after_the_last_train_batch_of_an_epoch_of_a_plain_dataloader_resumes_exactly(name, batch, tmp_path):
    setup = SETUPS[name]
    per_epoch = -(-setup.samples // setup.batch_size)
    _assert_resumes_exactly(setup, StopAt(batch // 4 * per_epoch + per_epoch - 1), tmp_path)


@pytest.mark.parametrize("batch", [5, 7, 9], ids=lambda b: f"batch{b}")
def test_partial_gradients_of_an_unfinished_accumulation_window_are_restored(batch, tmp_path):
    _assert_resumes_exactly(SETUPS["torchdata-accumulate-3-of-5"], StopAt(batch), tmp_path)


@pytest.mark.parametrize("batch", [3, 7], ids=["epoch0", "epoch1"])
def test_seedable_sampler_resumes_exactly_between_epochs_without_set_epoch(batch, tmp_path):
    # SeedableRandomSampler's seed is torch.initial_seed() at prepare time: configuration,
    # so the resumed process is seeded as the original one was (as Accelerate documents).
    _assert_resumes_exactly(SETUPS["seedable-sampler"], StopAt(batch), tmp_path, seed_value=0)


# Accelerate's rule for a plain DataLoader saved inside its pass: its loop reads the loader whole in the resumed
# epoch, so that epoch restarts from its first batch (its counts too), warned at the save and at the resume.

_PLAIN_MID_EPOCH = "after 2 batches of an epoch: a plain DataLoader has no position of its own.*StatefulDataLoader"


def test_a_save_state_inside_the_pass_of_a_plain_dataloader_warns_naming_statefuldataloader(tmp_path):
    with pytest.warns(InexactResumeWarning, match=f"^saving .* {_PLAIN_MID_EPOCH}"):
        run(SETUPS["shuffled"], stop=StopAt(5), save_dir=str(tmp_path))


def test_a_load_state_inside_the_pass_of_a_plain_dataloader_warns_naming_statefuldataloader(tmp_path):
    run(SETUPS["shuffled"], stop=StopAt(5), save_dir=str(tmp_path))
    with pytest.warns(InexactResumeWarning, match=f"^resuming .* {_PLAIN_MID_EPOCH}"):
        run(SETUPS["shuffled"], load_dir=str(tmp_path), seed_value=7)


@pytest.mark.filterwarnings("ignore::tracker_core.InexactResumeWarning")
@pytest.mark.parametrize("name", ["shuffled", "sequential", "shuffled-2-workers", "seedable-sampler", "iterable"])
def test_the_epoch_resumed_inside_the_pass_of_a_plain_dataloader_restarts_from_its_first_batch(name, tmp_path):
    setup = SETUPS[name]
    stopped = run(setup, stop=StopAt(5), save_dir=str(tmp_path))  # epoch 1 after 2 of its 4 batches
    resumed = run(setup, load_dir=str(tmp_path), seed_value=0)
    assert len(stopped.train_ids) == 6
    assert [len(ids) for ids in resumed.train_ids] == [3, 3, 3, 1] * 2  # epochs 1 and 2, each read whole
    view = resumed.progress.view
    assert view.train.epochs.lifetime.completed == 3
    assert view.train.batches.lifetime.processed == 6 + 8  # the 2 batches trained before the checkpoint stay counted
    assert view.train.samples.lifetime == 10 + 6 + 10 + 10  # epoch 0, 2 batches of epoch 1, epochs 1 and 2 whole
    assert view.train.dataloaders[0].batches.epoch == 4
    assert any("restarted train epoch 1 from its first batch" in anomaly for anomaly in view.anomalies)


@pytest.mark.filterwarnings("ignore::tracker_core.InexactResumeWarning")
def test_a_save_state_late_in_the_restarted_epoch_of_a_plain_dataloader_saves_its_own_count(tmp_path):
    # Counting the batches before the checkpoint and the whole pass would exceed the epoch (first law: no raise).
    run(SETUPS["shuffled"], stop=StopAt(5), save_dir=str(tmp_path / "first"))
    again = run(SETUPS["shuffled"], stop=StopAt(8), save_dir=str(tmp_path / "second"), load_dir=str(tmp_path / "first"))
    assert again.progress.view.train.dataloaders[0].batches.epoch == 3
    saved = torch.load(tmp_path / "second" / "progress_tracker_0.pt", weights_only=True)
    assert saved["tracker"]["train_loaders"][0]["batches_consumed"] == 3


@pytest.mark.filterwarnings("ignore::tracker_core.InexactResumeWarning")
def test_with_the_seedable_sampler_the_restarted_epoch_reads_the_saved_epochs_order_from_its_first_batch(tmp_path):
    reference = _reference(SETUPS["seedable-sampler"])
    run(SETUPS["seedable-sampler"], stop=StopAt(5), save_dir=str(tmp_path))
    resumed = run(SETUPS["seedable-sampler"], load_dir=str(tmp_path), seed_value=0)
    assert resumed.train_ids == reference.train_ids[4:]


@pytest.mark.filterwarnings("ignore::tracker_core.InexactResumeWarning")
def test_nothing_is_installed_on_a_plain_dataloader(tmp_path):
    run(SETUPS["shuffled"], stop=StopAt(5), save_dir=str(tmp_path))
    resumed = run(SETUPS["shuffled"], load_dir=str(tmp_path), seed_value=7)
    (train_loader,) = [loader for loader in resumed.accelerator._dataloaders if loader.dataset.size == 10]
    inner = train_loader.base_dataloader
    assert "_get_iterator" not in vars(inner)
    assert type(inner.batch_sampler.sampler) is torch.utils.data.RandomSampler


@pytest.mark.parametrize("epoch_end", [3, 7], ids=["epoch0", "epoch1"])
@pytest.mark.parametrize("name", ["shuffled", "shuffled-2-workers"])
def test_save_state_mid_evaluation_restarts_that_evaluation_and_resumes_exactly(name, epoch_end, tmp_path):
    _assert_resumes_exactly(SETUPS[name], StopAt(epoch_end, validating=True), tmp_path)


@pytest.mark.parametrize(
    ("name", "stop"),
    [("stateful", StopAt(7)), ("stateful-2-workers", StopAt(7))],
    ids=["last", "2-workers-last"],
)
def test_a_stateful_dataloader_resumes_exactly_by_accelerates_own_loader_state(name, stop, tmp_path):
    _assert_resumes_exactly(SETUPS[name], stop, tmp_path)


def test_a_stateful_dataloader_over_torchs_random_sampler_with_workers_warns_mid_epoch_and_its_next_epoch_is_exact(
    tmp_path,
):
    # A trade of positioning it by its own state alone: the resumed build draws the epoch's order again from the
    # restored RNGs, not from those the epoch's build found.
    reference = _reference(SETUPS["stateful-2-workers"])
    message = "mid-epoch by its own state: its RandomSampler has no state of its own"
    with pytest.warns(InexactResumeWarning, match=f"^saving .* {message}"):
        stopped = run(SETUPS["stateful-2-workers"], stop=StopAt(4), save_dir=str(tmp_path))
    with pytest.warns(InexactResumeWarning, match=f"^resuming .* {message}"):
        resumed = run(SETUPS["stateful-2-workers"], load_dir=str(tmp_path), seed_value=7)
    assert len(stopped.train_ids + resumed.train_ids) == len(reference.train_ids)  # its position stays exact
    assert resumed.train_ids[-4:] == reference.train_ids[-4:]  # the next epoch's order too


@pytest.mark.parametrize("stop", [StopAt(5), StopAt(7)], ids=["mid", "last"])
@pytest.mark.parametrize("name", ["stateful", "stateful-2-workers"])
def test_a_prepared_stateful_dataloader_with_torchdatas_own_sampler_resumes_exactly(name, stop, tmp_path, monkeypatch):
    monkeypatch.setattr(accelerate_drive, "DataLoader", StatefulDataLoader)  # the program's loaders, shuffle=True
    reference = run(SETUPS[name])
    stopped = run(SETUPS[name], stop=stop, save_dir=str(tmp_path))
    resumed = run(SETUPS[name], load_dir=str(tmp_path), seed_value=7)
    assert stopped.train_ids + resumed.train_ids == reference.train_ids
    assert all(torch.equal(a, b) for a, b in zip(resumed.weights, reference.weights, strict=True))
    assert resumed.state == reference.state


def test_a_stateful_dataloader_over_torchs_random_sampler_at_0_workers_warns_that_its_resumed_order_differs(tmp_path):
    # A trade of positioning it by its own state: torchdata reads the stateless sampler again at the first batch.
    run(SETUPS["stateful"], stop=StopAt(4), save_dir=str(tmp_path))
    with pytest.warns(InexactResumeWarning, match="its RandomSampler has no state of its own"):
        run(SETUPS["stateful"], load_dir=str(tmp_path), seed_value=7)


def test_a_save_state_mid_pass_of_a_stateful_dataloader_over_torchs_random_sampler_at_0_workers_warns(tmp_path):
    # The trade the resume names (the test above), named at the save too.
    with pytest.warns(
        InexactResumeWarning, match="^saving .* mid-epoch by its own state: its RandomSampler has no state of its own"
    ):
        run(SETUPS["stateful"], stop=StopAt(4), save_dir=str(tmp_path))


def test_a_first_epoch_read_from_the_iterator_prepare_built_over_torchs_random_sampler_warns_at_save_and_resume(
    tmp_path,
):
    # prepare() builds an iterator (state_dict() does), and the first epoch reads it, tracked or not: its order
    # was drawn then, unseen by the tracker, and a resume with workers draws it again from the restored RNGs.
    message = "mid-epoch by its own state: its RandomSampler has no state of its own"
    with pytest.warns(InexactResumeWarning, match=f"^saving .* {message}"):
        run(SETUPS["stateful-2-workers"], stop=StopAt(1), save_dir=str(tmp_path))
    with pytest.warns(InexactResumeWarning, match=f"^resuming .* {message}"):
        run(SETUPS["stateful-2-workers"], load_dir=str(tmp_path), seed_value=7)


def test_a_stateful_validation_loader_saved_mid_way_warns_that_its_restart_is_not_exact(tmp_path):
    # Its first pass used the iterator prepare() built; the restarted pass builds another one.
    run(SETUPS["stateful"], stop=StopAt(3, validating=True), save_dir=str(tmp_path))
    with pytest.warns(InexactResumeWarning, match="validate dataloader 0 is a StatefulDataLoader"):
        run(SETUPS["stateful"], load_dir=str(tmp_path), seed_value=7)


def test_a_save_state_inside_a_stateful_validation_pass_warns_that_its_restart_is_not_exact(tmp_path):
    # The trade the resume names (the test above), named at the save too.
    with pytest.warns(
        InexactResumeWarning, match="save_state inside the pass of validate dataloader 0, a StatefulDataLoader"
    ):
        run(SETUPS["stateful"], stop=StopAt(3, validating=True), save_dir=str(tmp_path))


def test_a_stateful_validation_loader_saved_mid_way_in_a_later_pass_resumes_exactly_unwarned(tmp_path):
    # A later pass builds its iterator as it begins, as the restarted pass does.
    with warnings.catch_warnings():
        warnings.simplefilter("error", InexactResumeWarning)
        reference = _reference(SETUPS["stateful"])
        stopped = run(SETUPS["stateful"], stop=StopAt(7, validating=True), save_dir=str(tmp_path))
        resumed = run(SETUPS["stateful"], load_dir=str(tmp_path), seed_value=7)
    assert stopped.val_ids[:-2] + resumed.val_ids == reference.val_ids  # the cut pass is read again whole
    assert stopped.train_ids + resumed.train_ids == reference.train_ids
    assert all(torch.equal(a, b) for a, b in zip(resumed.weights, reference.weights, strict=True))
    assert resumed.state == reference.state


def test_a_stateful_validation_loader_shuffled_by_its_own_generator_warns_that_a_later_pass_restarts_inexactly(
    tmp_path,
):
    # Its generator is restored as the save left it, not as the pass began: the restart draws another order.
    setup = dataclasses.replace(SETUPS["stateful"], val_generator=True)
    with pytest.warns(InexactResumeWarning, match="save_state inside the pass .* RandomSampler draws its order"):
        run(setup, stop=StopAt(7, validating=True), save_dir=str(tmp_path))
    with pytest.warns(InexactResumeWarning, match="validate dataloader 0 is a StatefulDataLoader .* RandomSampler"):
        run(setup, load_dir=str(tmp_path), seed_value=7)


@pytest.mark.parametrize(
    "stop", [StopAt(3), StopAt(7), StopAt(3, validating=True)], ids=["epoch0", "epoch1", "mid-eval"]
)
def test_iterable_dataset_behind_accelerates_dispatcher_resumes_exactly_between_epochs(stop, tmp_path):
    # The dataset draws its order from the global torch RNG when iterated: restored with the checkpoint.
    _assert_resumes_exactly(SETUPS["iterable"], stop, tmp_path)


def test_progress_file_loads_with_weights_only(tmp_path):
    run(Setup(), stop=StopAt(5), save_dir=str(tmp_path))
    saved = torch.load(tmp_path / "progress_tracker_0.pt", weights_only=True)
    assert saved["tracker"]["progress"]["stages"]["train"]["batches"]["lifetime"]["processed"] == 6
    assert all(g is None or isinstance(g, torch.Tensor) for g in saved["gradients"])


def _automatic_naming_program(project_dir: Path, load: bool, load_from: Path | None = None) -> list[str]:
    setup = Setup()
    accelerator = fresh_accelerator(setup, project_dir=str(project_dir))
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    model, optimizer, loader = accelerator.prepare(
        model, torch.optim.SGD(model.parameters(), lr=0.1), DataLoader(Indexed(10), batch_size=3)
    )
    progress = AcceleratorProgress(accelerator)
    accelerator.register_for_checkpointing(progress)
    if load:
        accelerator.load_state(None if load_from is None else str(load_from))
        accelerator.project_configuration.iteration = progress.next_save_iteration  # as the docs say
    with progress.fit(2) as fit:
        for _epoch in fit.epochs():
            for _ids, x, y in progress.train(loader):
                with accelerator.accumulate(model):
                    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                    optimizer.step()
                    optimizer.zero_grad()
                if progress.view.train.batches.lifetime.completed in (2, 5):
                    accelerator.save_state()
                    if not load:
                        break
            if not load:
                break
    return sorted(os.listdir(project_dir / "checkpoints"))


def test_a_second_save_state_after_resuming_gets_the_next_checkpoint_name(tmp_path):
    assert _automatic_naming_program(tmp_path, load=False) == ["checkpoint_0"]
    assert _automatic_naming_program(tmp_path, load=True) == ["checkpoint_0", "checkpoint_1"]


def test_resuming_from_an_older_checkpoint_beside_a_damaged_newer_one_saves_after_both(tmp_path):
    _automatic_naming_program(tmp_path, load=False)
    (tmp_path / "checkpoints" / "checkpoint_1").mkdir()  # a save_state cut short by a kill
    names = _automatic_naming_program(tmp_path, load=True, load_from=tmp_path / "checkpoints" / "checkpoint_0")
    assert names == ["checkpoint_0", "checkpoint_1", "checkpoint_2"]


_CHILD = """
import sys, torch
sys.path.insert(0, {tests!r})
from helpers.accelerate_drive import Setup, run
result = run(Setup(stateful=True, torchdata=True), load_dir={directory!r}, seed_value=11)
torch.save({{"weights": result.weights, "ids": result.train_ids, "state": result.state}}, {out!r})
"""


def test_resume_in_a_new_python_process_is_exact(tmp_path):
    setup = SETUPS["torchdata-shuffled"]
    stopped = run(setup, stop=StopAt(5), save_dir=str(tmp_path / "ckpt"))
    out = tmp_path / "resumed.pt"
    code = _CHILD.format(tests=str(Path(__file__).parent), directory=str(tmp_path / "ckpt"), out=str(out))
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent, timeout=120)
    resumed = torch.load(out, weights_only=True)
    reference = _reference(setup)
    assert stopped.train_ids + resumed["ids"] == reference.train_ids
    assert all(torch.equal(a, b) for a, b in zip(resumed["weights"], reference.weights, strict=True))
    assert resumed["state"] == reference.state
