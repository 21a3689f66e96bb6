"""An iterable dataset that carries its own position and counts the samples it reads (for the resume-speed tests)."""

from __future__ import annotations

from typing import Any

from torch.utils.data import Dataset, IterableDataset


class CountedStream(IterableDataset[Any]):
    """The samples of a map-style ``samples`` in order; its position is its own state (torchdata's
    ``state_dict`` / ``load_state_dict`` protocol); ``reads`` counts the samples read (0 workers)."""

    def __init__(self, samples: Dataset[Any]) -> None:
        self.samples = samples
        self.position = 0
        self.reads = 0

    def __len__(self) -> int:
        return len(self.samples)  # type: ignore[arg-type]

    def __iter__(self) -> CountedStream:
        self.position = 0
        return self

    def __next__(self) -> Any:
        if self.position == len(self):
            raise StopIteration
        self.position += 1
        self.reads += 1
        return self.samples[self.position - 1]

    def state_dict(self) -> dict[str, int]:
        return {"position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.position = state["position"]
