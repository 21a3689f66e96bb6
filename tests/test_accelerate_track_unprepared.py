"""``track_train_loader`` given the loader as built, before ``accelerator.prepare`` wrapped it (the loop iterates the
prepared one): refused when called, before training, with a real Accelerator(cpu=True)."""

from __future__ import annotations

import pytest

pytest.importorskip("accelerate")

import torch
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from tracker_core.integrations.accelerate import AcceleratorProgress

from helpers.accelerate_drive import Indexed, Setup, fresh_accelerator

pytestmark = pytest.mark.filterwarnings("ignore:'set_vital' is deprecated")


@pytest.mark.parametrize("stateful", [False, True], ids=["DataLoader", "StatefulDataLoader"])
def test_track_train_loader_refuses_the_loader_as_built_before_prepare(stateful: bool) -> None:
    accelerator = fresh_accelerator(Setup(stateful=stateful))
    built = (StatefulDataLoader if stateful else DataLoader)(Indexed(6), batch_size=3, shuffle=True)
    prepared = accelerator.prepare(built)
    progress = AcceleratorProgress(accelerator)
    rng = torch.get_rng_state()
    with pytest.raises(ValueError, match=r"prepare\(\) returned.*dataloader 0 is a \w*DataLoader Accelerate did not"):
        progress.track_train_loader(built)
    assert torch.equal(torch.get_rng_state(), rng)
    progress.track_train_loader(prepared)  # the loader the loop iterates
