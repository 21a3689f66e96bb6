"""Every private torch attribute data position touches still exists on the installed version (none of torchdata's)."""

from __future__ import annotations

import importlib
import re
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from tracker_core.data import _torch_compat
from tracker_core.data._torch_compat import ATTRIBUTES, check_attributes


def _cases() -> list[tuple[Any, str]]:
    return [(owner, name) for owner, names in ATTRIBUTES.items() for name in names]


@pytest.mark.parametrize(
    ("owner", "name"), [pytest.param(*case, id=f"{case[0].__name__}.{case[1]}") for case in _cases()]
)
def test_each_private_attribute_touched_exists(owner: Any, name: str) -> None:
    check_attributes("installed", "now", {owner: (name,)})


def test_a_missing_attribute_fails_at_import_naming_the_package_version() -> None:
    with pytest.raises(
        ImportError, match=rf"DataLoader\._gone, which torch {re.escape(torch.__version__)} does not have"
    ):
        check_attributes("torch", torch.__version__, {torch.utils.data.DataLoader: ("_gone",)})


def test_importing_the_compat_module_checks_the_installed_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(DataLoader, "_get_iterator")
    with pytest.raises(ImportError, match=rf"DataLoader\._get_iterator, which torch {re.escape(torch.__version__)}"):
        importlib.reload(_torch_compat)
