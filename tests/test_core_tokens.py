"""Tokens per stage: counted from a batch's input_ids/attention_mask or a user's function, in every scope,
saved, migrated, reduced over ranks."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch

from tracker_core import Progress, ProgressStateError, reduce_state
from tracker_core.adapter import TokenCounter

from helpers.core_drive import in_fit_epoch, json_roundtrip, whole_batch
from helpers.gloo import run_on_two_ranks
from helpers.tokens import text_batch


def _counted(progress: Progress, counter: TokenCounter, batch: object) -> None:
    stage = progress.train
    stage.batch_ready()
    stage.batch_started()
    counter(batch)
    stage.batch_processed(2)
    stage.batch_completed()


def test_input_ids_count_all_tokens_and_the_attention_mask_the_non_padding_ones() -> None:
    progress = in_fit_epoch()
    counter = TokenCounter(progress.train)
    _counted(progress, counter, text_batch(rows=2, length=5, padding=1))
    _counted(progress, counter, text_batch(rows=2, length=5, padding=2))
    assert progress.view.train.tokens == (20, 20, 20)
    assert progress.view.train.non_padding_tokens == (14, 14, 14)


def test_without_an_attention_mask_every_token_is_non_padding() -> None:
    progress = in_fit_epoch()
    _counted(progress, TokenCounter(progress.train), {"input_ids": torch.zeros(3, 4, dtype=torch.long)})
    assert progress.view.train.tokens.lifetime == progress.view.train.non_padding_tokens.lifetime == 12


def test_an_object_with_input_ids_attributes_is_read_like_a_mapping() -> None:
    class Encoding:
        def __init__(self, batch: dict[str, torch.Tensor]) -> None:
            self.input_ids, self.attention_mask = batch["input_ids"], batch["attention_mask"]

    progress = in_fit_epoch()
    _counted(progress, TokenCounter(progress.train), Encoding(text_batch(padding=2)))
    assert (progress.view.train.tokens.lifetime, progress.view.train.non_padding_tokens.lifetime) == (10, 6)


def test_batches_without_token_tensors_count_no_tokens() -> None:
    progress = in_fit_epoch()
    counter = TokenCounter(progress.train)
    for batch in ((torch.zeros(4, 3), torch.zeros(4)), torch.zeros(4, 3), {"x": torch.zeros(4, 3)}):
        _counted(progress, counter, batch)
    assert progress.view.train.tokens == (0, 0, 0)


def test_a_mapping_batch_after_a_plain_one_is_still_read() -> None:
    progress = in_fit_epoch()
    counter = TokenCounter(progress.train)
    _counted(progress, counter, {"x": torch.zeros(2)})
    _counted(progress, counter, text_batch(padding=0))
    assert progress.view.train.tokens.lifetime == 10


def test_a_token_function_replaces_reading_the_batch() -> None:
    progress = in_fit_epoch()
    counter = TokenCounter(progress.train, count_tokens=lambda batch: (7, 5))
    _counted(progress, counter, (torch.zeros(3, 4), torch.zeros(3)))
    _counted(progress, counter, text_batch())
    assert (progress.view.train.tokens.lifetime, progress.view.train.non_padding_tokens.lifetime) == (14, 10)


def test_a_token_function_returning_one_int_counts_it_as_non_padding_too() -> None:
    progress = in_fit_epoch()
    _counted(progress, TokenCounter(progress.train, count_tokens=lambda batch: 9), ())
    assert progress.view.train.non_padding_tokens.lifetime == 9


def test_a_bad_token_count_warns_once_and_counts_nothing() -> None:
    progress = in_fit_epoch()
    counter = TokenCounter(progress.train, count_tokens=lambda batch: (3, 5))
    with pytest.warns(UserWarning, match="count_tokens returned"):
        _counted(progress, counter, ())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _counted(progress, counter, ())
    assert progress.view.train.tokens.lifetime == 0
    assert progress.view.train.batches.lifetime.completed == 2


def test_tokens_have_epoch_run_and_lifetime_scope() -> None:
    progress = in_fit_epoch()
    progress.train.count_tokens(10, 8)
    progress.train.epoch_processed()
    progress.train.epoch_completed()
    progress.train.epoch_ready()
    progress.train.epoch_started()
    progress.train.count_tokens(5, 5)
    assert progress.view.train.tokens == (5, 15, 15)
    progress.train.epoch_processed()
    progress.train.epoch_completed()
    progress.run_processed()
    progress.run_completed()
    progress.run_ready("fit")
    assert progress.view.train.tokens == (0, 0, 15)
    assert progress.view.train.non_padding_tokens == (0, 0, 13)


def test_non_padding_above_tokens_is_refused_by_count_tokens() -> None:
    with pytest.raises(ValueError, match="non_padding"):
        in_fit_epoch().train.count_tokens(3, 4)


def test_tokens_survive_a_json_roundtrip_of_the_state() -> None:
    progress = in_fit_epoch(batches=1)
    TokenCounter(progress.train)(text_batch(padding=1))
    restored = Progress()
    restored.load_state_dict(json_roundtrip(progress.state_dict()))
    assert restored.view.train.tokens == progress.view.train.tokens == (10, 10, 10)
    assert restored.view.train.non_padding_tokens == (8, 8, 8)


def test_a_mask_sum_not_yet_read_is_in_the_saved_state() -> None:
    progress = in_fit_epoch()
    TokenCounter(progress.train)(text_batch(padding=2))
    assert progress.state_dict()["stages"]["train"]["non_padding_tokens"] == {"epoch": 6, "run": 6, "lifetime": 6}


def test_a_load_drops_a_mask_sum_not_yet_read() -> None:
    saved = in_fit_epoch().state_dict()
    progress = in_fit_epoch()
    TokenCounter(progress.train)(text_batch())
    progress.load_state_dict(saved)
    assert progress.view.train.non_padding_tokens == (0, 0, 0)


def test_non_padding_tokens_above_tokens_in_a_state_are_refused_naming_the_key() -> None:
    state = in_fit_epoch().state_dict()
    state["stages"]["train"]["non_padding_tokens"] = {"epoch": 1, "run": 1, "lifetime": 1}
    progress = Progress()
    with pytest.raises(ProgressStateError, match=r"stages\.train\.non_padding_tokens\.epoch"):
        progress.load_state_dict(state)
    assert progress.view.train.tokens == (0, 0, 0)


def test_reduce_state_reports_the_tokens_without_a_process_group() -> None:
    progress = in_fit_epoch(batches=1)
    progress.train.count_tokens(12, 10)
    reduced = reduce_state(progress)
    assert reduced["stages"]["train"]["tokens"] == {"epoch": 12, "run": 12, "lifetime": 12}
    assert reduced["stages"]["train"]["non_padding_tokens"]["lifetime"] == 10


def test_evaluation_stages_count_their_own_tokens() -> None:
    progress = in_fit_epoch()
    progress.validate.epoch_ready()
    progress.validate.epoch_started()
    whole_batch(progress, "validate")
    TokenCounter(progress.validate)(text_batch(padding=0))
    assert progress.view.validate.tokens.lifetime == 10
    assert progress.view.train.tokens.lifetime == 0


def _tokens_reduced_on_rank(rank: int) -> dict[str, Any]:
    progress = in_fit_epoch(batches=1)
    TokenCounter(progress.train)(text_batch(rows=2, length=5, padding=rank + 1))
    return reduce_state(progress)["stages"]["train"]


def test_reduce_state_sums_the_tokens_of_two_gloo_ranks() -> None:
    rank0, rank1 = run_on_two_ranks(_tokens_reduced_on_rank)
    assert rank0["tokens"] == rank1["tokens"] == {"epoch": 20, "run": 20, "lifetime": 20}
    assert rank0["non_padding_tokens"]["lifetime"] == 8 + 6
