"""Under DDP Lightning wraps a sampler that is not torch's own (torchdata's ``RandomSampler``, which
``StatefulDataLoader(shuffle=True)`` builds) in its ``DistributedSamplerWrapper``, which has no state: a resume
iterates the wrapper again, drawing the shuffled order again. A checkpoint of such a loader warns at the save and at
the resume. One process stands in for DDP here: the loader is given already wrapped, as Lightning would wrap it."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pytorch_lightning")
pytest.importorskip("torchdata")

import torch
from lightning_fabric.utilities.distributed import DistributedSamplerWrapper
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import RandomSampler

from tracker_core import InexactResumeWarning
from tracker_core.integrations.lightning import ProgressTracker

from helpers.lightning_program import Indexed, Recording, SaveAndStop, Stop, trainer

WRAPPED = "Lightning wrapped its sampler for DDP in a DistributedSamplerWrapper"


def _fit(seed: int, *callbacks: Any, ckpt_path: Path | None = None) -> Recording:
    torch.manual_seed(seed)
    data = Indexed(12)
    sampler = DistributedSamplerWrapper(RandomSampler(data), num_replicas=1, rank=0, shuffle=False)
    module = Recording()
    with contextlib.suppress(Stop):
        trainer([ProgressTracker(), *callbacks], max_epochs=2, limit_val_batches=0).fit(
            module, StatefulDataLoader(data, batch_size=3, sampler=sampler), ckpt_path=ckpt_path
        )
    return module


def test_a_stateful_loader_over_a_sampler_wrapped_for_ddp_warns_at_save_and_resume_that_its_order_is_drawn_again(
    tmp_path: Path,
) -> None:
    straight = _fit(0)
    with pytest.warns(InexactResumeWarning, match=WRAPPED):
        first = _fit(0, SaveAndStop(tmp_path / "mid.ckpt", 2))
    with pytest.warns(InexactResumeWarning, match=WRAPPED):
        resumed = _fit(1234, ckpt_path=tmp_path / "mid.ckpt")
    assert first.seen + resumed.seen != straight.seen  # the limit the warnings name
