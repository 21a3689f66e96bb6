"""Token counts in tests: states compared without them, and text batches that carry them."""

from __future__ import annotations

from typing import Any

import torch

TOKEN_KEYS = ("tokens", "non_padding_tokens")


def text_batch(rows: int = 2, length: int = 5, padding: int = 1) -> dict[str, torch.Tensor]:
    """A tokenizer-like batch: ``input_ids`` of ``rows`` x ``length``, the last ``padding`` of each row padded."""
    mask = torch.ones(rows, length, dtype=torch.long)
    mask[:, length - padding :] = 0
    return {"input_ids": torch.arange(rows * length).view(rows, length) % 50, "attention_mask": mask}


def text_dataset(rows: int = 4, length: int = 5) -> list[dict[str, torch.Tensor]]:
    """``rows`` tokenized rows of ``length``: row ``i`` ends in ``i`` padding tokens (20 tokens, 14 not padding)."""
    dataset = []
    for i in range(rows):
        mask = torch.ones(length, dtype=torch.long)
        mask[length - i :] = 0
        dataset.append({"input_ids": torch.arange(length) * (i + 1) % 50, "attention_mask": mask})
    return dataset


def lightning_text_model(pl: Any) -> Any:
    """A tiny LightningModule of package ``pl`` that trains and validates on ``text_dataset`` batches."""

    class TextModel(pl.LightningModule):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Embedding(50, 4), torch.nn.Flatten(), torch.nn.Linear(20, 1))

        def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
            return self.net(batch["input_ids"]).mean()

        def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
            self.net(batch["input_ids"])

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return TextModel()
