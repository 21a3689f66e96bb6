"""``ResumeRngCheck`` alone: what it remembers at a load, what it reads back, and when it is spent."""

from __future__ import annotations

import random

import pytest
import torch

from tracker_core import InexactResumeWarning
from tracker_core.adapter import GlobalRng, ResumeRngCheck


def test_it_reads_back_the_states_it_remembered_until_forgotten() -> None:
    check = ResumeRngCheck(load="the load")
    assert not check.armed and check.loaded_state is None
    torch.manual_seed(3)
    check.loaded()
    loaded = check.loaded_state
    assert check.armed and loaded is not None
    assert isinstance(loaded.torch_state, torch.Tensor) and torch.equal(loaded.torch_state, torch.get_rng_state())
    torch.rand(1)
    random.random()
    assert check.loaded_state is loaded  # what moved since is compared, not remembered
    assert check.moved_since(GlobalRng.capture()) == ("torch", "python")
    check.forget()
    assert check.loaded_state is None and check.moved_since(GlobalRng.capture()) == ()


def test_a_warning_spends_it() -> None:
    check = ResumeRngCheck(load="the load")
    check.loaded()
    assert not check.check("nowhere")  # nothing moved: still armed
    torch.rand(1)
    with pytest.warns(InexactResumeWarning, match="Seed before the load, not after"):
        assert check.check("after the load")
    assert not check.armed and check.loaded_state is None
