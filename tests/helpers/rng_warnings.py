"""Picking the tracker's warnings about a global RNG moved after a checkpoint load (``ResumeRngCheck``)."""

from __future__ import annotations

import warnings

from tracker_core import InexactResumeWarning


def rng_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    """The messages of the InexactResumeWarnings about the global RNG among ``caught``."""
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, InexactResumeWarning) and "global RNG state changed" in str(w.message)
    ]
