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
step, the full progress state. 320 configurations with ``TRACKER_MATRIX=full``; a seeded sample
of 20 otherwise.
"""

from __future__ import annotations

import os
import random
import warnings
from pathlib import Path

import pytest

pytest.importorskip("ignite")

import torch

from tracker_core import InexactResumeWarning

from helpers.ignite_matrix import Boom, Case, Played, cases, play, resume
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
