"""The library's size budgets (issue 26): lines, classes, functions and the adapter module's names can only
shrink. A number here goes down when the code does; one that would grow fails by name."""

from __future__ import annotations

import ast
from pathlib import Path

import tracker_core.adapter

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*ROOT.glob("tracker_core/**/*.py"), *ROOT.glob("integrations/**/*.py")])

# Lines of tracker_core/ and integrations/ (`find tracker_core integrations -name '*.py' | xargs wc -l`) on
# 2026-12-05; issue 26's goal: 11,000.
LINES = 14_653
CLASS_LINES = 400
FUNCTION_LINES = 60
# The classes and functions over those limits today, with their length: each to be split (issue 26).
LONGER = {
    "integrations/lightning/_callback.py:ProgressTracker": 919,
    "integrations/ignite/_handler.py:attach": 84,
    "integrations/lightning/_callback.py:_track_train_loaders": 76,
    "tracker_core/distributed/_elastic.py:select": 68,
    "tracker_core/distributed/_elastic.py:_map_loader": 74,
    "tracker_core/distributed/_loader_summary.py:summarize_loader": 61,
}
ADAPTER_NAMES = 33  # issue 26's goal: 30


def _lengths() -> dict[str, int]:
    """``path:name`` of every class over ``CLASS_LINES`` and function over ``FUNCTION_LINES``, with its lines."""
    found: dict[str, int] = {}
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            limit = CLASS_LINES if isinstance(node, ast.ClassDef) else FUNCTION_LINES
            if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > limit:
                    found[f"{path.relative_to(ROOT).as_posix()}:{node.name}"] = length
    return found


def test_the_library_has_at_most_its_budget_of_lines() -> None:
    lines = sum(len(path.read_text().splitlines()) for path in SOURCES)
    assert lines <= LINES, f"{lines} lines, budget {LINES}"


def test_no_class_or_function_is_longer_than_its_limit_but_those_listed_and_none_grows() -> None:
    grown = {name: length for name, length in _lengths().items() if length > LONGER.get(name, 0)}
    assert grown == {}, f"over {CLASS_LINES} lines a class, {FUNCTION_LINES} a function (or longer than listed)"


def test_each_listed_long_class_or_function_is_still_long() -> None:
    found = _lengths()
    assert [name for name in LONGER if name not in found] == [], "split: remove them from LONGER"


def test_the_adapter_module_has_at_most_its_budget_of_names() -> None:
    assert len(tracker_core.adapter.__all__) <= ADAPTER_NAMES
