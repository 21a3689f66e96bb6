"""The library's size limits (issue 26): no class over 400 lines, no function over 60, the adapter module at most
30 names, and the library's lines held to a budget that goes down when the code does."""

from __future__ import annotations

import ast
from pathlib import Path

import tracker_core.adapter

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*ROOT.glob("tracker_core/**/*.py"), *ROOT.glob("integrations/**/*.py")])

# Lines of tracker_core/ and integrations/ (`find tracker_core integrations -name '*.py' | xargs wc -l`) on
# 2026-12-07; issue 26's goal: 11,000.
LINES = 12_509
CLASS_LINES = 400
FUNCTION_LINES = 60
ADAPTER_NAMES = 30


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


def test_no_class_is_longer_than_400_lines_and_no_function_than_60() -> None:
    assert _lengths() == {}


def test_the_adapter_module_has_at_most_its_budget_of_names() -> None:
    assert len(tracker_core.adapter.__all__) <= ADAPTER_NAMES
