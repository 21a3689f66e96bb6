"""The private attributes the compat modules touch that instances get in ``__init__`` (``INSTANCE_ATTRIBUTES``) exist
on real instances of the installed versions; class attributes are checked when each compat module is imported."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tracker_core.data import _torch_compat


def _missing(instances: dict[str, Any], listed: dict[str, tuple[str, ...]]) -> list[str]:
    return [
        f"{owner}.{name}" for owner, names in listed.items() for name in names if not hasattr(instances[owner], name)
    ]


@pytest.mark.parametrize("kind", ["DataLoader", "StatefulDataLoader"])
def test_torchs_instance_attributes_exist(kind: str) -> None:
    # data position touches them on a loader with its own state (torchdata's StatefulDataLoader, a DataLoader)
    build = (
        DataLoader if kind == "DataLoader" else pytest.importorskip("torchdata.stateful_dataloader").StatefulDataLoader
    )
    loader = build(torch.arange(4))
    built = (loader, iter(loader))  # a loader and its iterator (a _BaseDataLoaderIter)
    instances = {owner: next(i for i in built if isinstance(i, owner)) for owner in _torch_compat.INSTANCE_ATTRIBUTES}
    assert _missing(instances, _torch_compat.INSTANCE_ATTRIBUTES) == []


@pytest.mark.parametrize("package", ["pytorch_lightning", "lightning.pytorch"])
def test_lightnings_instance_attributes_exist(package: str) -> None:
    pl = pytest.importorskip(package)
    compat = importlib.import_module("tracker_core.integrations.lightning._compat")
    combined = importlib.import_module(f"{package}.utilities.combined_loader").CombinedLoader
    trainer = pl.Trainer(
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    instances = {"_FitLoop": trainer.fit_loop, "CombinedLoader": combined([[0]])}
    assert _missing(instances, compat.INSTANCE_ATTRIBUTES) == []


def test_ignites_instance_attributes_exist() -> None:
    engine = pytest.importorskip("ignite.engine")
    compat = importlib.import_module("tracker_core.integrations.ignite._compat")
    instances = {"Engine": engine.Engine(lambda engine, batch: None)}
    assert _missing(instances, compat.INSTANCE_ATTRIBUTES) == []


def test_accelerates_instance_attributes_exist() -> None:
    accelerate = pytest.importorskip("accelerate")
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state(True)  # as every test building an Accelerator does first
    GradientState._reset_state()
    compat = importlib.import_module("tracker_core.integrations.accelerate._compat")
    instances = {accelerate.Accelerator: accelerate.Accelerator(cpu=True), DataLoader: DataLoader(torch.arange(4))}
    assert _missing(instances, compat.INSTANCE_ATTRIBUTES) == []
