"""Token counts in tests: states compared without them, and text batches that carry them."""

from __future__ import annotations

from typing import Any

import torch

TOKEN_KEYS = ("tokens", "non_padding_tokens")


def without_tokens(state: dict[str, Any]) -> dict[str, Any]:
    """A progress state without the stages' token counts (what version 2 held, beside the times)."""
    return {
        **state,
        "stages": {
            name: {key: value for key, value in stage.items() if key not in TOKEN_KEYS}
            for name, stage in state["stages"].items()
        },
    }


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
