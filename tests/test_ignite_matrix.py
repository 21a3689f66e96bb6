"""The oracle matrix for Ignite: generated configurations, the view checked against engine.state at every event.

Each configuration (tests/helpers/ignite_matrix.py) combines optimizers (SGD, Adam, two in a
custom update function), ``create_supervised_trainer(gradient_accumulation_steps=k)``,
``max_epochs`` or ``max_iters``, ``epoch_length``, an evaluator after every epoch, and one of
``terminate``/``terminate_epoch``/``interrupt`` (then ``run()`` again while Ignite's state is
not done), ``run()`` again after the end or with more epochs, a step exception an
``EXCEPTION_RAISED`` handler swallows or one that leaves ``run()``, or a ``terminate`` from
ITERATION_STARTED. The oracle (tests/helpers/ignite_oracle.py) must record no disagreement and
the adapter raise nothing. Where a checkpoint is taken, fresh objects resume from it and must
end exactly as the uninterrupted run: weights ``torch.equal``, the sample ids of every later
step, the full progress state (the loader a StatefulDataLoader). The same cases with a plain DataLoader saved
mid-epoch warn at the save and the resume, and the resumed run follows Ignite's rule, the oracle agreeing. 320 configurations with ``TRACKER_MATRIX=full``; a seeded sample
of 20 otherwise.
"""

from __future__ import annotations

import os
import random
import warnings
from pathlib import Path

import pytest

pytest.importorskip("ignite")
pytest.importorskip("torchdata")

import torch

from tracker_core import InexactResumeWarning

from helpers.ignite_matrix import PER_EPOCH, Boom, Case, Played, cases, play, resume
from helpers.ledger import without_ledger

FULL = os.environ.get("TRACKER_MATRIX") == "full"
ALL = cases(320)
CASES = ALL if FULL else random.Random(7).sample(ALL, 20)

pytestmark = [pytest.mark.matrix, pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")]


def _agrees(played: Played) -> None:
    assert played.oracle is not None
    assert played.oracle.disagreements == []
    assert all(isinstance(error, Boom) for error in played.swallowed), played.swallowed  # none from the adapter


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.name)
def test_the_view_agrees_with_engine_state_and_a_resume_is_exact(case: Case, tmp_path: Path) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reference = play(case, tmp_path)
        _agrees(reference)
        if case.save_at is None or not (tmp_path / "checkpoint.pt").exists():
            return
        resumed = resume(case, tmp_path)
    _agrees(resumed)
    assert [str(w.message) for w in caught if issubclass(w.category, InexactResumeWarning)] == []
    for name, weight in reference.weights().items():
        assert torch.equal(resumed.weights()[name], weight), name
    assert resumed.seen == reference.seen[reference.seen_at_save :]
    assert without_ledger(resumed.progress.view.state_dict()) == without_ledger(reference.progress.view.state_dict())


@pytest.mark.parametrize("case", [case for case in CASES if case.save_at is not None], ids=lambda case: case.name)
def test_a_plain_loader_resumed_agrees_with_engine_state_at_every_event_and_warns_inside_an_epoch(
    case: Case, tmp_path: Path
) -> None:
    # Ignite's rule inside an epoch: a fresh iter(dataloader), the epoch completes after epoch_length - k iterations.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reference = play(case, tmp_path, plain=True)
        _agrees(reference)
        if not (tmp_path / "checkpoint.pt").exists():
            return
        resumed = resume(case, tmp_path, plain=True)
    _agrees(resumed)
    inside = 0 < reference.epoch_batches_at_save < PER_EPOCH
    inexact = [str(w.message) for w in caught if issubclass(w.category, InexactResumeWarning)]
    assert [message.split(" DataLoader")[0] for message in inexact] == ["saving", "resuming"] * inside, inexact
    assert all("StatefulDataLoader" in message for message in inexact)
    assert resumed.trainer.state.iteration == reference.trainer.state.iteration
    assert resumed.trainer.state.epoch == reference.trainer.state.epoch
    assert "_get_iterator" not in vars(resumed.loader)  # nothing installed on the loader
    if not inside:  # between epochs a plain loader resumes exactly
        for name, weight in reference.weights().items():
            assert torch.equal(resumed.weights()[name], weight), name
        assert resumed.seen == reference.seen[reference.seen_at_save :]
