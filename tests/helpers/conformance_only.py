"""Tests that run long belong to ``make conformance`` (``TRACKER_MATRIX=full``); ``make test`` skips them."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

import pytest

FULL = os.environ.get("TRACKER_MATRIX") == "full"
Test = TypeVar("Test", bound=Callable[..., object])
MARKS = (pytest.mark.matrix, pytest.mark.skipif(not FULL, reason="runs long: make conformance (TRACKER_MATRIX=full)"))


def conformance_only(test: Test) -> Test:
    """Run ``test`` only in ``make conformance`` (it is marked ``matrix``, which that target selects)."""
    for mark in MARKS:
        test = mark(test)
    return test
