"""Tokens counted by each adapter with its real framework, on a tiny text model fed dict batches."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from helpers.tokens import lightning_text_model, text_dataset


def _text_loader() -> DataLoader[Any]:
    return DataLoader(text_dataset(), batch_size=2)


def test_ignite_counts_the_tokens_of_each_stage() -> None:
    pytest.importorskip("ignite")
    from ignite.engine import Engine

    from tracker_core.integrations.ignite import ProgressHandler

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 4), torch.nn.Flatten(), torch.nn.Linear(20, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step(engine: Engine, batch: dict[str, torch.Tensor]) -> float:
        optimizer.zero_grad()
        loss = model(batch["input_ids"]).mean()
        loss.backward()
        optimizer.step()
        return float(loss.detach())

    trainer, evaluator = Engine(train_step), Engine(lambda engine, batch: None)
    progress = ProgressHandler()
    progress.attach(trainer, optimizers=[optimizer])
    progress.attach(evaluator, stage="validate")
    trainer.run(_text_loader(), max_epochs=2)
    view = progress.view
    assert view.train.tokens == (20, 40, 40)  # 4 rows of 5 tokens per epoch
    assert view.train.non_padding_tokens == (14, 28, 28)  # rows padded by 0, 1, 2, 3
    evaluator.run(_text_loader())
    assert view.validate.tokens.lifetime == 20
    assert view.validate.non_padding_tokens.lifetime == 14


def test_lightning_counts_the_tokens_of_each_stage(tmp_path: Any) -> None:
    pl = pytest.importorskip("pytorch_lightning")

    from tracker_core.integrations.lightning import ProgressTracker

    progress = ProgressTracker()
    trainer = pl.Trainer(
        max_epochs=2,
        callbacks=[progress],
        default_root_dir=tmp_path,
        enable_checkpointing=False,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(lightning_text_model(pl), _text_loader(), _text_loader())
    view = progress.tracker.view
    assert view.train.tokens.lifetime == 40 and view.train.non_padding_tokens.lifetime == 28
    assert view.validate.tokens.lifetime == 40 and view.validate.non_padding_tokens.lifetime == 28


def test_accelerate_counts_the_tokens_of_each_stage() -> None:
    accelerate = pytest.importorskip("accelerate")

    from tracker_core.integrations.accelerate import AcceleratorProgress

    torch.manual_seed(0)
    accelerator = accelerate.Accelerator(cpu=True)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 4), torch.nn.Flatten(), torch.nn.Linear(20, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, train_loader, val_loader = accelerator.prepare(model, optimizer, _text_loader(), _text_loader())
    progress = AcceleratorProgress(accelerator)
    with progress.fit(2) as fit:
        for _ in fit.epochs():
            for batch in progress.train(train_loader):
                accelerator.backward(model(batch["input_ids"]).mean())
                optimizer.step()
                optimizer.zero_grad()
            for batch in progress.evaluate(val_loader):
                model(batch["input_ids"])
    view = progress.view
    assert view.train.tokens.lifetime == 40 and view.train.non_padding_tokens.lifetime == 28
    assert view.validate.tokens.lifetime == 40 and view.validate.non_padding_tokens.lifetime == 28
