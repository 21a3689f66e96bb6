"""A map-style dataset whose samples are their own indices: what a resume test compares."""

from __future__ import annotations

from torch.utils.data import Dataset


class Ids(Dataset[int]):
    """``size`` samples; sample ``i`` is ``i``."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        return index
