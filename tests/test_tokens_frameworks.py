"""Tokens counted by each adapter with its real framework, on a tiny text model fed dict batches."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from helpers.tokens import text_dataset


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
