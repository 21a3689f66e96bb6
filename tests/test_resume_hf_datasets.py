"""A Hugging Face ``datasets.IterableDataset`` resumes exactly: through its own state in a ``StatefulDataLoader``.

A tiny in-memory dataset (``Dataset.from_dict(...).to_iterable_dataset(num_shards=4)``, no network)
whose ``map`` counts the examples it reads (in shared memory, so reads in worker processes count)
trains a linear model for two epochs. The interrupted run stops after a mid-epoch checkpoint taken
with one batch prefetched beyond the trained ones (as frameworks fetch); a fresh loader over a fresh
dataset and a fresh model resume from it. The resumed run trains the same sample ids, ends with the
same weights as the uninterrupted run; a ``StatefulDataLoader`` reads only the examples it trains. A plain
``DataLoader`` does not use the dataset's own state: its mid-epoch save and resume warn, and the resumed epoch is
read from its first example (nothing is read only to be dropped).
Every run calls ``set_epoch`` before each epoch, as Hugging Face requires: a loaded state applies to
the epoch it was saved in, and without ``set_epoch`` every epoch counts as that one.
"""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Callable
from typing import Any

import pytest

datasets = pytest.importorskip("datasets")
pytest.importorskip("torchdata")

import torch
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core import InexactResumeWarning
from tracker_core.data._position import LoaderPosition

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")

SIZE = 24
BATCH = 3  # 8 batches an epoch
EPOCHS = 2
CONSUMED = 5  # batches of the first epoch trained before the checkpoint
_FORK = multiprocessing.get_context("fork")


class _Examples:
    """A fresh Hugging Face iterable over ids ``0..SIZE-1``; ``reads`` counts the examples its ``map`` read."""

    def __init__(self) -> None:
        self.reads = _FORK.Value("i", 0)
        table = datasets.Dataset.from_dict({"id": list(range(SIZE)), "x": [float(i) / SIZE for i in range(SIZE)]})
        self.dataset = table.to_iterable_dataset(num_shards=4).map(self._read)

    def _read(self, example: dict[str, Any]) -> dict[str, Any]:
        with self.reads.get_lock():
            self.reads.value += 1
        return example


def _workers(count: int) -> dict[str, Any]:
    return {"num_workers": count, "multiprocessing_context": "fork"} if count else {}


LOADERS: dict[str, Callable[[Any], DataLoader[Any]]] = {
    "stateful-dataloader-0-workers": lambda data: StatefulDataLoader(data, batch_size=BATCH),
    "stateful-dataloader-2-workers": lambda data: StatefulDataLoader(data, batch_size=BATCH, **_workers(2)),
}


class _Training:
    """A linear model trained on each batch's ``x``; ``ids`` lists each trained batch's sample ids."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = torch.nn.Linear(1, 1)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
        self.ids: list[list[int]] = []

    def step(self, batch: dict[str, torch.Tensor]) -> None:
        self.ids.append(batch["id"].tolist())
        self.optimizer.zero_grad()
        loss = (self.model(batch["x"].float().unsqueeze(1)) - 1.0).pow(2).mean()
        loss.backward()
        self.optimizer.step()

    def weights(self) -> list[float]:
        return [value.item() for value in torch.cat([p.detach().flatten() for p in self.model.parameters()])]


def _uninterrupted(build: Callable[[Any], DataLoader[Any]]) -> _Training:
    training = _Training()
    data = _Examples().dataset
    loader = build(data)
    for epoch in range(EPOCHS):
        data.set_epoch(epoch)
        for batch in loader:
            training.step(batch)
    return training


def _interrupted(build: Callable[[Any], DataLoader[Any]]) -> tuple[_Training, dict[str, Any]]:
    """Train ``CONSUMED`` batches with one more fetched (none for a loader with its own state, saved as it is: a
    loop that does not prefetch); the checkpoint (model, optimizer, position) as JSON."""
    training = _Training()
    data = _Examples().dataset
    data.set_epoch(0)
    loader = build(data)
    position = LoaderPosition(loader)
    batches = iter(loader)
    fetched = [next(batches) for _ in range(CONSUMED + (position.kind != "own_state"))]
    for batch in fetched[:CONSUMED]:
        training.step(batch)
    checkpoint = {
        "model": {k: v.clone() for k, v in training.model.state_dict().items()},
        "optimizer": training.optimizer.state_dict(),
        "position": json.loads(json.dumps(position.state_dict(batches_consumed=CONSUMED))),
    }
    return training, checkpoint


def _resumed(build: Callable[[Any], DataLoader[Any]], checkpoint: dict[str, Any]) -> tuple[_Training, _Examples]:
    """Fresh objects resumed from ``checkpoint``, trained to the end of ``EPOCHS``."""
    training = _Training()
    training.model.load_state_dict(checkpoint["model"])
    training.optimizer.load_state_dict(checkpoint["optimizer"])
    examples = _Examples()
    loader = build(examples.dataset)
    LoaderPosition(loader).load_state_dict(checkpoint["position"])
    for epoch in range(EPOCHS):
        examples.dataset.set_epoch(epoch)
        for batch in loader:
            training.step(batch)
    return training, examples


def _samples(batches: list[list[int]]) -> int:
    return sum(len(batch) for batch in batches)


@pytest.mark.filterwarnings("error::tracker_core.data._fast_forward.SlowResumeWarning")
@pytest.mark.parametrize("name", list(LOADERS))
def test_a_hugging_face_iterable_resumes_exactly_through_its_own_state_reading_only_what_it_trains(name: str) -> None:
    build = LOADERS[name]
    whole = _uninterrupted(build)
    before, checkpoint = _interrupted(build)
    after, examples = _resumed(build, checkpoint)
    assert before.ids + after.ids == whole.ids
    assert after.weights() == whole.weights()
    assert examples.reads.value == _samples(after.ids)


@pytest.mark.filterwarnings("error::tracker_core.data._fast_forward.SlowResumeWarning")
@pytest.mark.parametrize("workers", [0, 2])
def test_a_plain_dataloader_over_a_hugging_face_iterable_warns_mid_epoch_and_its_resumed_epoch_starts_over(
    workers: int,
) -> None:
    def build(data: Any) -> DataLoader[Any]:
        return DataLoader(data, batch_size=BATCH, **_workers(workers))

    whole = _uninterrupted(build)
    with pytest.warns(
        InexactResumeWarning, match=f"^saving DataLoader .* after {CONSUMED} batches.*StatefulDataLoader"
    ):
        _, checkpoint = _interrupted(build)
    with pytest.warns(InexactResumeWarning, match=f"^resuming DataLoader .* after {CONSUMED} batches"):
        after, examples = _resumed(build, checkpoint)
    assert after.ids == whole.ids  # this loop reads each epoch whole, the resumed one from its first example
    assert examples.reads.value == _samples(after.ids)
