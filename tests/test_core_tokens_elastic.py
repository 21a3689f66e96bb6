"""Tokens across an elastic resume: saved on 2 gloo ranks, resumed at world size 1, the run and lifetime
tokens continue from the saved rank's (docs/schema.md: tokens are not remapped, samples are)."""

from __future__ import annotations

import copy
import functools
import itertools
import json
from typing import Any

import pytest
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from tracker_core import InexactResumeWarning, Tracker

from helpers.gloo import run_on_two_ranks

SAMPLES, BATCH, EPOCHS, SEED = 20, 2, 3, 5  # world 2: 10 samples per rank, 5 batches of 2
TOKENS, NON_PADDING = 5, 4  # per sample
SAVE_AT = (1, 2)  # after batch 2 of epoch 1: 2 x 2 x 2 = 8 samples of the epoch consumed


class _Indexed(Dataset[int]):
    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> int:
        return index


def _loader(world: int, rank: int) -> DataLoader[int]:
    sampler = DistributedSampler(_Indexed(), num_replicas=world, rank=rank, seed=SEED, shuffle=True)
    return DataLoader(_Indexed(), batch_size=BATCH, sampler=sampler)


def _fit(tracker: Tracker, loader: DataLoader[int], save_at: tuple[int, int] | None = None) -> dict[str, Any] | None:
    """Fit to EPOCHS epochs, each batch counting TOKENS/NON_PADDING per sample; with ``save_at``, stop
    there and return the gathered entry (through JSON). As Lightning and Ignite do, an epoch ends when its batch
    count reaches the loader's length (a plain loader resumed inside an epoch reads the rest from its start)."""
    progress, view, train = tracker.progress, tracker.view, tracker.progress.train
    progress.run_ready("fit")
    progress.run_started()
    while view.epoch_index < EPOCHS:
        train.epoch_ready()
        train.epoch_started()
        loader.sampler.set_epoch(view.epoch_index)  # type: ignore[attr-defined]
        remaining = len(loader) - view.train.batches.epoch.completed
        for batch in itertools.islice(loader, max(remaining, 0)):
            train.batch_ready()
            train.batch_started()
            train.count_tokens(TOKENS * len(batch), NON_PADDING * len(batch))
            train.optimizer_step()
            train.batch_processed(len(batch))
            train.batch_completed()
            if (view.epoch_index, view.train.batches.epoch.completed) == save_at:
                return json.loads(json.dumps(tracker.gathered_state_dict()))
        train.epoch_processed()
        train.epoch_completed()
    progress.run_processed()
    progress.run_completed()
    return None


def _saved_on_rank(rank: int) -> dict[str, Any] | None:
    tracker, loader = Tracker(), _loader(2, rank)
    tracker.track_train_loader(loader)
    return _fit(tracker, loader, save_at=SAVE_AT)


@functools.cache
def _saved_at_world_two() -> dict[str, Any]:
    entry: dict[str, Any] = run_on_two_ranks(_saved_on_rank)[0]  # the writer's: every rank's entry
    return entry


def _resumed_at_world_one() -> tuple[Tracker, DataLoader[int]]:
    tracker, loader = Tracker(), _loader(1, 0)
    tracker.track_train_loader(loader)
    with pytest.warns(InexactResumeWarning, match="a plain DataLoader has no position of its own"):
        tracker.load_state_dict(copy.deepcopy(_saved_at_world_two()))
    return tracker, loader


def _tokens(state: dict[str, Any], key: str = "tokens") -> dict[str, int]:
    return state["stages"]["train"][key]  # type: ignore[no-any-return]


def test_resumed_at_world_size_1_the_tokens_are_the_saved_ranks() -> None:
    saved = _saved_at_world_two()
    tracker, _ = _resumed_at_world_one()
    assert tracker.view.resume_mapping is not None and tracker.view.resume_mapping["saved_world_size"] == 2
    assert tuple(tracker.view.train.tokens) == tuple(_tokens(saved["ranks"][0]["progress"]).values())
    assert _tokens(saved["ranks"][0]["progress"])["lifetime"] == (5 + 2) * BATCH * TOKENS  # 7 batches on rank 0


def test_tokens_of_the_run_and_lifetime_continue_after_an_elastic_resume() -> None:
    saved = _tokens(_saved_at_world_two()["ranks"][0]["progress"])
    saved_non_padding = _tokens(_saved_at_world_two()["ranks"][0]["progress"], "non_padding_tokens")
    tracker, loader = _resumed_at_world_one()
    _fit(tracker, loader)
    trained_after = (SAMPLES - 8) + SAMPLES  # the rest of epoch 1's batches at world size 1, then epoch 2
    tokens, non_padding = tracker.view.train.tokens, tracker.view.train.non_padding_tokens
    assert (tokens.run, tokens.lifetime) == (
        saved["run"] + TOKENS * trained_after,
        saved["lifetime"] + TOKENS * trained_after,
    )
    assert non_padding.lifetime == saved_non_padding["lifetime"] + NON_PADDING * trained_after
    assert tokens.epoch == TOKENS * SAMPLES  # the last epoch, trained whole at world size 1
