"""The live display in real short runs of Lightning, Ignite and Accelerate: the same lines, the view's counts."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("ignite")
pytest.importorskip("accelerate")
pytest.importorskip("torchdata")

import pytorch_lightning as pl
import torch
from ignite.engine import Engine, Events
from ignite.handlers import Checkpoint, DiskSaver
from torch.utils.data import DataLoader, IterableDataset

from tracker_core import InexactResumeWarning, ProgressView, get_progress
from tracker_core.display._display import format_metric
from tracker_core.integrations.ignite import ProgressDisplay as IgniteDisplay
from tracker_core.integrations.ignite import ProgressHandler
from tracker_core.integrations.lightning import ProgressDisplay as LightningDisplay
from tracker_core.integrations.lightning import ProgressTracker

from helpers.ignite_program import Config, build
from helpers.lightning_program import IndexedStream, Recording, loader


def _counts(text: str) -> list[str]:
    """The display's lines without their timing fields (samples/s, ETA), which depend on the machine."""
    return [
        " | ".join(part for part in line.split(" | ") if not part.endswith("samples/s") and not part.startswith("ETA"))
        for line in text.splitlines()
    ]


def _final_train_line(view: ProgressView, epochs: int) -> str:
    """The line the display must end a fit with, built from the view's final counts."""
    train = view.train
    return f"train    | epoch {train.epochs.run.completed}/{epochs} | batch {train.batches.epoch.processed}/" + (
        f"{train.batches.epoch.processed} | steps {view.global_step}"
    )


# Lightning ---------------------------------------------------------------------------------
def _lightning(callbacks: list[pl.Callback], **kwargs: Any) -> pl.Trainer:
    kwargs.setdefault("max_epochs", 2)
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        callbacks=callbacks,
        **kwargs,
    )


_LIGHTNING_FIT = [
    "train    | epoch 1/2 | batch 4/4 | steps 4",
    "validate | epoch 1/2 | batch 2/2 | steps 4",
    "train    | epoch 2/2 | batch 4/4 | steps 8",
    "validate | epoch 2/2 | batch 2/2 | steps 8",
]


class _Logging(Recording):
    """Logs its loss to the progress bar each step and a validation loss each validation epoch."""

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
        loss = super().training_step(batch, batch_idx)
        self.log("loss", 0.25, prog_bar=True)
        self.log("hidden", 1.0)  # not for the bar
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", 0.5, prog_bar=True, on_epoch=True)


@pytest.mark.parametrize("bar_first", [False, True], ids=["tracker-first", "bar-first"])
def test_lightning_bar_prints_each_epochs_line_and_ends_on_the_views_counts(bar_first: bool) -> None:
    out = io.StringIO()
    bar, tracker = LightningDisplay(stream=out, terminal=False, interval=1000.0), ProgressTracker()
    trainer = _lightning([bar, tracker] if bar_first else [tracker, bar])
    trainer.fit(Recording(), loader(10, 3), loader(5, 3))
    assert trainer.progress_bar_callback is bar
    assert _counts(out.getvalue()) == _LIGHTNING_FIT
    assert _LIGHTNING_FIT[-2] == _final_train_line(get_progress(trainer), 2)


def test_lightning_bar_shows_the_metrics_logged_for_the_progress_bar() -> None:
    out = io.StringIO()
    trainer = _lightning([ProgressTracker(), LightningDisplay(stream=out, terminal=False, interval=1000.0)])
    trainer.fit(_Logging(), loader(10, 3), loader(5, 3))
    assert _counts(out.getvalue()) == [
        "train    | epoch 1/2 | batch 4/4 | steps 4 | loss=0.25",
        "validate | epoch 1/2 | batch 2/2 | steps 4 | loss=0.25, val_loss=0.5",
        "train    | epoch 2/2 | batch 4/4 | steps 8 | loss=0.25, val_loss=0.5",
        "validate | epoch 2/2 | batch 2/2 | steps 8 | loss=0.25, val_loss=0.5",
    ]


def test_lightning_bar_shows_the_loggers_version_as_lightnings_bars_do(tmp_path: Path) -> None:
    from pytorch_lightning.loggers import CSVLogger

    out = io.StringIO()
    trainer = pl.Trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=CSVLogger(tmp_path, version=7),
        enable_checkpointing=False,
        enable_model_summary=False,
        callbacks=[ProgressTracker(), LightningDisplay(stream=out, terminal=False)],
    )
    trainer.fit(_Logging(), loader(10, 3))
    assert _counts(out.getvalue()) == ["train    | epoch 1/1 | batch 4/4 | steps 4 | v_num=7, loss=0.25"]


def test_lightning_bar_alone_brings_its_own_tracker_and_resumes_with_it(tmp_path: Path) -> None:
    out = io.StringIO()
    trainer = _lightning([LightningDisplay(stream=out, terminal=False)], max_epochs=1)
    trainer.fit(Recording(), loader(10, 3))
    trackers = [callback for callback in trainer.callbacks if isinstance(callback, ProgressTracker)]
    assert len(trackers) == 1 and get_progress(trainer) is trackers[0].tracker.view
    assert _counts(out.getvalue()) == ["train    | epoch 1/1 | batch 4/4 | steps 4"]
    trainer.save_checkpoint(tmp_path / "one.ckpt")
    out = io.StringIO()
    resumed = _lightning([LightningDisplay(stream=out, terminal=False)], max_epochs=2)
    resumed.fit(Recording(), loader(10, 3), ckpt_path=tmp_path / "one.ckpt")
    assert get_progress(resumed).train.epochs.lifetime.completed == 2  # the saved epoch and this one
    assert _counts(out.getvalue()) == [_final_train_line(get_progress(resumed), 2)]


def test_lightning_validation_inside_an_epoch_comes_before_that_epochs_train_line() -> None:
    out = io.StringIO()
    trainer = _lightning(
        [ProgressTracker(), LightningDisplay(stream=out, terminal=False, interval=1000.0)],
        max_epochs=1,
        val_check_interval=2,
    )
    trainer.fit(Recording(), loader(10, 3), loader(5, 3))
    assert _counts(out.getvalue()) == [
        "validate | epoch 1/1 | batch 2/2 | steps 2",  # after train batch 2 of 4
        "train    | epoch 1/1 | batch 4/4 | steps 4",
        "validate | epoch 1/1 | batch 2/2 | steps 4",
    ]


def test_lightning_bar_shows_test_validate_and_predict_runs_without_epoch_or_steps() -> None:
    out = io.StringIO()
    trainer = _lightning([ProgressTracker(), LightningDisplay(stream=out, terminal=False)])
    model = Recording()
    trainer.test(model, loader(7, 3))
    trainer.validate(model, loader(5, 3))
    trainer.predict(model, loader(4, 3))
    assert _counts(out.getvalue()) == ["test     | batch 3/3", "validate | batch 2/2", "predict  | batch 2/2"]


def test_lightning_bar_on_iterable_data_shows_batches_without_a_total() -> None:
    out = io.StringIO()
    trainer = _lightning([ProgressTracker(), LightningDisplay(stream=out, terminal=False)], max_epochs=1)
    trainer.fit(Recording(), DataLoader(IndexedStream(10), batch_size=3))
    assert _counts(out.getvalue()) == ["train    | epoch 1/1 | batch 4 | steps 4"]


def test_lightning_bar_resumed_mid_epoch_continues_the_runs_epoch_and_step_counts(tmp_path: Path) -> None:
    class Killed(Exception):
        pass

    class SaveThenDie(pl.Callback):
        def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
            if trainer.global_step == 6:  # epoch 2, batch 2
                trainer.save_checkpoint(tmp_path / "mid.ckpt")
                raise Killed

    first = _lightning([ProgressTracker(), SaveThenDie()], max_epochs=3, enable_progress_bar=False)
    with pytest.raises(Killed), pytest.warns(InexactResumeWarning, match="saving DataLoader .* after 2 batches"):
        first.fit(Recording(), loader(10, 3))  # a plain loader: Lightning reads the resumed epoch from its start
    out = io.StringIO()
    trainer = _lightning([ProgressTracker(), LightningDisplay(stream=out, terminal=False)], max_epochs=3)
    with pytest.warns(InexactResumeWarning, match="resuming DataLoader .* after 2 batches"):
        trainer.fit(Recording(), loader(10, 3), ckpt_path=tmp_path / "mid.ckpt")
    assert _counts(out.getvalue()) == [
        "train    | epoch 2/3 | batch 4/4 | steps 8",
        "train    | epoch 3/3 | batch 4/4 | steps 12",
    ]


def test_lightning_module_print_goes_through_the_display() -> None:
    class Printing(Recording):
        def on_train_epoch_end(self) -> None:
            self.print("epoch done")

    out = io.StringIO()
    trainer = _lightning([ProgressTracker(), LightningDisplay(stream=out, terminal=False)], max_epochs=1)
    trainer.fit(Printing(), loader(10, 3))
    assert _counts(out.getvalue()) == ["train    | epoch 1/1 | batch 4/4 | steps 4", "epoch done"]  # callbacks first


def test_lightning_bar_draws_on_a_terminal_and_finishes() -> None:
    out = io.StringIO()
    trainer = _lightning([ProgressTracker(), LightningDisplay(stream=out, terminal=True)])
    trainer.fit(Recording(), loader(10, 3), loader(5, 3))
    assert "\x1b[" in out.getvalue()
    assert _final_train_line(get_progress(trainer), 2) in out.getvalue()


# Ignite ------------------------------------------------------------------------------------
_IGNITE_FIT = [
    line
    for epoch, steps in ((1, 4), (2, 8), (3, 12))
    for line in (
        f"train    | epoch {epoch}/3 | batch 4/4 | steps {steps}",
        f"validate | epoch {epoch}/3 | batch 3/3 | steps {steps}",
    )
]


def _ignite_display(program: Any, out: io.StringIO, terminal: bool = False) -> None:
    display = IgniteDisplay(stream=out, terminal=terminal, interval=1000.0)
    display.attach(program.trainer)
    display.attach(program.evaluator)


def test_ignite_handler_prints_each_epochs_line_and_ends_on_the_views_counts() -> None:
    program, out = build(Config(), seed=0), io.StringIO()
    _ignite_display(program, out)
    program.run()
    assert _counts(out.getvalue()) == _IGNITE_FIT
    assert _IGNITE_FIT[-2] == _final_train_line(get_progress(program.trainer), 3)


def test_ignite_handler_shows_the_output_and_metrics_asked_for_as_ignites_progress_bar() -> None:
    from ignite.metrics import Loss

    program, out, computed = build(Config(), seed=0), io.StringIO(), []
    Loss(torch.nn.functional.mse_loss).attach(program.evaluator, "mse")
    program.evaluator.add_event_handler(Events.COMPLETED, lambda e: computed.append(e.state.metrics["mse"]))
    display = IgniteDisplay(stream=out, terminal=False, interval=1000.0)
    display.attach(program.trainer, output_transform=lambda loss: {"loss": loss})
    display.attach(program.evaluator, metric_names="all")
    program.run()
    lines = out.getvalue().splitlines()
    assert [line.split(" | ")[0].strip() for line in lines] == ["train", "validate"] * 3
    assert all(line.rsplit(" | ", 1)[1].startswith("loss=") for line in lines[0::2])
    assert [line.rsplit(" | ", 1)[1] for line in lines[1::2]] == [f"mse={format_metric(v)}" for v in computed]


def test_ignite_evaluator_over_the_train_set_is_shown_under_the_name_given() -> None:
    program, out = build(Config(), seed=0), io.StringIO()
    train_evaluator = Engine(lambda engine, batch: None)
    program.progress.attach(train_evaluator, stage="validate")
    train_set = DataLoader(program.loader.dataset, batch_size=program.loader.batch_size)
    program.trainer.add_event_handler(Events.EPOCH_COMPLETED, lambda: train_evaluator.run(train_set))
    display = IgniteDisplay(stream=out, terminal=False, interval=1000.0)
    display.attach(program.trainer)
    display.attach(program.evaluator)
    display.attach(train_evaluator, name="train-eval")
    program.run()
    assert _counts(out.getvalue())[:3] == [
        "train    | epoch 1/3 | batch 4/4 | steps 4",
        "validate | epoch 1/3 | batch 3/3 | steps 4",
        "train-eval | epoch 1/3 | batch 4/4 | steps 4",
    ]


def test_ignite_handler_lines_beside_ignites_tqdm_progress_bar_each_start_a_screen_line() -> None:
    from ignite.handlers import ProgressBar

    program, out = build(Config(), seed=0), io.StringIO()
    ProgressBar(file=out, mininterval=0).attach(program.trainer)
    _ignite_display(program, out)
    program.run()
    text = out.getvalue()
    starts = [i for i in range(len(text)) if text.startswith("train    | epoch", i)]
    assert len(starts) == 3
    assert all(text[i - 1] in "\r\n" for i in starts)  # the bar was cleared before each line
    assert "Epoch [3/3]" in text  # Ignite's bar was drawn


def test_ignite_handler_needs_a_progress_handler_on_the_engine_first() -> None:
    with pytest.raises(
        ValueError, match=r"attach a tracker_core\.integrations\.ignite\.ProgressHandler to this engine"
    ):
        IgniteDisplay().attach(Engine(lambda engine, batch: None))


def test_ignite_handler_refuses_engines_of_another_progress_handler() -> None:
    display = IgniteDisplay(stream=io.StringIO())
    first, second = Engine(lambda e, b: None), Engine(lambda e, b: None)
    ProgressHandler().attach(first)
    ProgressHandler().attach(second)
    display.attach(first)
    with pytest.raises(ValueError, match="another ProgressHandler"):
        display.attach(second)


class _Unsized(IterableDataset):
    def __iter__(self) -> Any:
        return iter(torch.arange(10.0).reshape(10, 1))


def test_ignite_handler_learns_an_iterables_epoch_length_after_its_first_epoch() -> None:
    engine, out = Engine(lambda e, b: None), io.StringIO()
    ProgressHandler().attach(engine)
    IgniteDisplay(stream=out, terminal=False).attach(engine)
    engine.run(DataLoader(_Unsized(), batch_size=3), max_epochs=2)
    assert _counts(out.getvalue()) == [
        "train    | epoch 1/2 | batch 4 | steps 0",
        "train    | epoch 2/2 | batch 4/4 | steps 0",
    ]


def test_ignite_handler_resumed_mid_epoch_continues_the_runs_epoch_and_step_counts(tmp_path: Path) -> None:
    program = build(Config(), seed=0)
    checkpoint = Checkpoint(program.to_save(), DiskSaver(str(tmp_path), require_empty=False), n_saved=None)
    program.trainer.add_event_handler(Events.ITERATION_COMPLETED(once=6), checkpoint)
    program.trainer.add_event_handler(Events.ITERATION_COMPLETED(once=6), lambda e: e.terminate())
    with pytest.warns(InexactResumeWarning, match="saving DataLoader .* after 2 batches"):
        program.run()  # a plain loader: Ignite reads the resumed epoch from its start
    resumed, out = build(Config(), seed=1), io.StringIO()
    Checkpoint.load_objects(resumed.to_save(), str(next(tmp_path.glob("*.pt"))))
    _ignite_display(resumed, out)
    with pytest.warns(InexactResumeWarning, match="resuming DataLoader .* after 2 batches"):
        resumed.run()
    assert _counts(out.getvalue()) == _IGNITE_FIT[2:]


def test_ignite_handler_draws_on_a_terminal_and_finishes() -> None:
    program, out = build(Config(), seed=0), io.StringIO()
    _ignite_display(program, out, terminal=True)
    program.run()
    assert "\x1b[" in out.getvalue()
    assert _final_train_line(get_progress(program.trainer), 3) in out.getvalue()


# Accelerate --------------------------------------------------------------------------------
def _accelerate_fit(out: io.StringIO, terminal: bool = False, stop_after: int | None = None) -> ProgressView:
    """Two epochs of 10 samples in batches of 3 and a validation of 7 in batches of 3, with the display."""
    from tracker_core.integrations.accelerate import AcceleratorProgress

    from helpers.accelerate_drive import Indexed, Setup, fresh_accelerator

    accelerator = fresh_accelerator(Setup(accumulation=1))
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, train, val = accelerator.prepare(
        model, optimizer, DataLoader(Indexed(10), batch_size=3), DataLoader(Indexed(7), batch_size=3)
    )
    progress = AcceleratorProgress(accelerator)
    progress.display(stream=out, terminal=terminal, interval=1000.0)
    with progress.fit(2) as fit:
        for _ in fit.epochs():
            for position, (_ids, x, y) in enumerate(progress.train(train)):
                accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                optimizer.step()
                optimizer.zero_grad()
                if position == stop_after:
                    break
            for _ids, x, _y in progress.evaluate(val):
                model(x)
    return progress.view


def test_accelerate_display_prints_each_passs_line_and_ends_on_the_views_counts() -> None:
    out = io.StringIO()
    view = _accelerate_fit(out)
    lines = [
        "train    | epoch 1/2 | batch 4/4 | steps 4",
        "validate | epoch 1/2 | batch 3/3 | steps 4",
        "train    | epoch 2/2 | batch 4/4 | steps 8",
        "validate | epoch 2/2 | batch 3/3 | steps 8",
    ]
    assert _counts(out.getvalue()) == lines
    assert lines[2] == _final_train_line(view, 2)


def test_accelerate_without_display_iterates_the_loops_own_generator() -> None:
    from tracker_core.integrations.accelerate import AcceleratorProgress

    from helpers.accelerate_drive import Indexed, Setup, fresh_accelerator

    accelerator = fresh_accelerator(Setup())
    progress = AcceleratorProgress(accelerator)
    batches = progress.train(accelerator.prepare(DataLoader(Indexed(10), batch_size=3)))
    assert batches.gi_code is AcceleratorProgress._train_pass.__code__  # type: ignore[attr-defined]
    batches.close()


def test_accelerate_display_of_a_pass_cut_short_shows_the_batches_it_trained() -> None:
    out = io.StringIO()
    _accelerate_fit(out, stop_after=1)
    assert _counts(out.getvalue())[0] == "train    | epoch 1/2 | batch 2/4 | steps 2"


def test_accelerate_display_draws_on_a_terminal_and_finishes() -> None:
    out = io.StringIO()
    view = _accelerate_fit(out, terminal=True)
    assert "\x1b[" in out.getvalue()
    assert _final_train_line(view, 2) in out.getvalue()
