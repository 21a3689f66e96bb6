"""One code path per batch mark: a refused mark changes nothing, whichever mark it is, and a fused mark whose
first part is accepted keeps that part when its second is refused, as the two marks called in turn would."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from tracker_core import EventOrderError, Progress, count_optimizer_steps

BATCH = (torch.zeros(4, 3), torch.zeros(4))


def _in_epoch() -> Progress:
    progress = Progress()
    progress.run_ready("fit")
    progress.run_started()
    progress.train.epoch_ready()
    progress.train.epoch_started()
    return progress


def _begun(progress: Progress) -> Progress:
    progress.train.batch_begin()
    return progress


def _processed(progress: Progress) -> Progress:
    progress.train.batch_begin()
    progress.train.batch_processed(4)
    return progress


def _state(progress: Progress) -> tuple[dict[str, Any], Any]:
    return progress.state_dict(), progress.view.where


REFUSED: list[tuple[str, Callable[[], Progress], Callable[[Progress], object], type[Exception], str]] = [
    ("ready-in-flight", lambda: _begun(_in_epoch()), lambda p: p.train.batch_ready(), EventOrderError, "not completed"),
    ("started-twice", lambda: _begun(_in_epoch()), lambda p: p.train.batch_started(), EventOrderError, "before it was ready"),
    ("processed-unstarted", _in_epoch, lambda p: p.train.batch_processed(4), EventOrderError, "before it was started"),
    ("processed-negative", lambda: _begun(_in_epoch()), lambda p: p.train.batch_processed(-1), ValueError, "samples"),
    ("completed-unprocessed", lambda: _begun(_in_epoch()), lambda p: p.train.batch_completed(), EventOrderError, "before it was processed"),
    ("begin-outside-epoch", Progress, lambda p: p.train.batch_begin(), EventOrderError, "outside an epoch"),
    ("end-again", lambda: _processed(_in_epoch()), lambda p: p.train.batch_end(4), EventOrderError, "again"),
    ("end-negative-dataloader", lambda: _begun(_in_epoch()), lambda p: p.train.batch_end(4, -1), ValueError, "dataloader"),
    ("next-unprocessed", lambda: _begun(_in_epoch()), lambda p: p.train.batch_next(), EventOrderError, "not completed"),
    ("processed-of-unstarted", _in_epoch, lambda p: p.train.batch_processed_of(BATCH), EventOrderError, "started"),
    ("end-of-negative-dataloader", lambda: _begun(_in_epoch()), lambda p: p.train.batch_end_of(BATCH, -1), ValueError, "dataloader"),
    ("turn-unstarted", _in_epoch, lambda p: p.train.batch_turn(BATCH), EventOrderError, "none was started"),
    ("turn-processed", lambda: _processed(_in_epoch()), lambda p: p.train.batch_turn(BATCH), EventOrderError, "none was started"),
    ("turn-negative-dataloader", lambda: _begun(_in_epoch()), lambda p: p.train.batch_turn(BATCH, -1), ValueError, "dataloader"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("made", "mark", "error", "match"), [case[1:] for case in REFUSED], ids=[c[0] for c in REFUSED]
)
def test_a_refused_batch_mark_raises_and_changes_nothing(
    made: Callable[[], Progress], mark: Callable[[Progress], object], error: type[Exception], match: str
) -> None:
    progress = made()
    before = _state(progress)
    with pytest.raises(error, match=match):
        mark(progress)
    assert _state(progress) == before


def test_batch_next_outside_an_epoch_completes_the_processed_batch_and_refuses_the_next() -> None:
    fused, phased = _processed(_in_epoch()), _processed(_in_epoch())
    for progress in (fused, phased):
        progress.train.epoch_processed()
        progress.train.epoch_completed()
    with pytest.raises(EventOrderError, match="outside an epoch"):
        fused.train.batch_next()
    phased.train.batch_completed()
    with pytest.raises(EventOrderError, match="outside an epoch"):
        phased.train.batch_ready()
    assert _state(fused) == _state(phased)
    assert fused.view.where == ("train", "batch", "completed")


def test_a_batch_turner_counts_its_dataloader_before_any_batch_is_turned() -> None:
    progress = _in_epoch()
    progress.train.batch_turner(2)
    assert len(progress.view.train.dataloaders) == 3


def test_a_hooked_optimizer_step_counts_as_optimizer_step() -> None:
    hooked, marked = _begun(_in_epoch()), _begun(_in_epoch())
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    count_optimizer_steps(hooked.train, [optimizer], first_index=1)
    optimizer.step()
    marked.train.optimizer_step(1)
    assert _state(hooked) == _state(marked)
