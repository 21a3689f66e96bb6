"""Compiled, per layout, the two halves of reduce_state around its one collective.

A layout is how many dataloaders each stage has and how many optimizers train has.
For each layout seen, two functions are generated once (as ``collections.namedtuple``
does) and cached: ``pack(progress)`` reads every count straight from the live counters
into one flat tuple, and ``unpack(values, where, kind)`` builds the ``state_dict()``
layout from such a tuple in one nested literal. Both are single expressions, several
times faster than walking the counters with calls per count; reduce_state runs them
right after a collective, where Python is at its slowest.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from tracker_core.vocabulary import Phase
from tracker_core.counting._progress import Progress
from tracker_core.counting._stage import TrainStageProgress
from tracker_core.state._schema import SCHEMA_VERSION


class Layout(NamedTuple):
    """The compiled pack and unpack of one layout, and the key path of every count."""

    pack: Callable[[Progress], tuple[int, ...]]
    unpack: Callable[[tuple[int, ...], dict[str, str], str], dict[str, Any]]
    paths: tuple[str, ...]


_LAYOUTS: dict[tuple[int, ...], Layout] = {}


def layout_of(progress: Progress) -> Layout:
    """The compiled layout of ``progress``'s current shape (compiled on first sight)."""
    train = progress.train
    key = (
        len(train._dataloaders),
        len(progress.validate._dataloaders),
        len(progress.test._dataloaders),
        len(progress.predict._dataloaders),
        len(train._optimizer_steps),
        len(train._optimizer_steps_skipped),
    )
    layout = _LAYOUTS.get(key)
    if layout is None:
        layout = _LAYOUTS[key] = _compile(*_sources(progress))
    return layout


def _sources(progress: Progress) -> tuple[dict[str, Any], str, list[str], list[str]]:
    """The unpacked tree (leaves are source text: ``v[i]`` for the i-th count), the statements binding
    each counter of ``p`` to a local, and each count's expression (over those locals) and key path,
    in ``state_dict()`` key order."""
    exprs: list[str] = []
    paths: list[str] = []
    counters: dict[str, str] = {}  # each counter's expression from ``p`` -> the local bound to it

    def count(path: str, expr: str) -> str:
        exprs.append(expr)
        paths.append(path)
        return f"v[{len(exprs) - 1}]"

    def phases(path: str, source: str, base: str) -> dict[str, str]:
        counter = counters.setdefault(source, f"c{len(counters)}")
        minus = f" - {counter}.{base}" if base else ""
        return {phase.value: count(f"{path}.{phase}", f"{counter}.{phase}{minus}") for phase in Phase}

    def scopes(path: str, source: str) -> dict[str, str]:
        tally = counters.setdefault(source, f"c{len(counters)}")
        return {
            "epoch": count(f"{path}.epoch", f"{tally}.total - {tally}.epoch_base"),
            "run": count(f"{path}.run", f"{tally}.total - {tally}.run_base"),
            "lifetime": count(f"{path}.lifetime", f"{tally}.total"),
        }

    tree: dict[str, Any] = {
        "schema_version": repr(SCHEMA_VERSION),
        "where": "where",
        "run": {"kind": "kind", **phases("run", "p._runs", "")},
    }
    stages: dict[str, Any] = {}
    for stage in progress._stages():
        at, s = f"stages.{stage.name}", f"p.{stage.name}"
        node: dict[str, Any] = {
            "epochs": {
                "run": phases(f"{at}.epochs.run", f"{s}._epochs", "run_base"),
                "lifetime": phases(f"{at}.epochs.lifetime", f"{s}._epochs", ""),
            },
            "batches": {
                "epoch": phases(f"{at}.batches.epoch", f"{s}._batches", "epoch_base"),
                "run": phases(f"{at}.batches.run", f"{s}._batches", "run_base"),
                "lifetime": phases(f"{at}.batches.lifetime", f"{s}._batches", ""),
            },
            "samples": scopes(f"{at}.samples", f"{s}._samples"),
            "dataloaders": [
                {
                    "batches": scopes(f"{at}.dataloaders.{i}.batches", f"{s}._dataloaders[{i}].batches"),
                    "samples": scopes(f"{at}.dataloaders.{i}.samples", f"{s}._dataloaders[{i}].samples"),
                }
                for i in range(len(stage._dataloaders))
            ],
        }
        if isinstance(stage, TrainStageProgress):
            node["optimizer_steps"] = [
                scopes(f"{at}.optimizer_steps.{i}", f"{s}._optimizer_steps[{i}]")
                for i in range(len(stage._optimizer_steps))
            ]
            node["optimizer_steps_skipped"] = [
                scopes(f"{at}.optimizer_steps_skipped.{i}", f"{s}._optimizer_steps_skipped[{i}]")
                for i in range(len(stage._optimizer_steps_skipped))
            ]
            node["scheduler_steps"] = scopes(f"{at}.scheduler_steps", f"{s}._scheduler_steps")
            node["accumulating_batches"] = count(f"{at}.accumulating_batches", f"{s}._accumulating_batches")
        stages[stage.name] = node
    tree["stages"] = stages
    bindings = "".join(f"    {name} = {source}\n" for source, name in counters.items())
    return tree, bindings, exprs, paths


def _compile(tree: dict[str, Any], bindings: str, exprs: list[str], paths: list[str]) -> Layout:
    code = (
        f"def pack(p):\n{bindings}    return ({', '.join(exprs)},)\n"
        f"def unpack(v, where, kind):\n    return {_literal(tree)}\n"
    )
    namespace: dict[str, Any] = {}
    exec(compile(code, "<tracker_core reduce_state layout>", "exec"), namespace)  # our own generated code
    return Layout(namespace["pack"], namespace["unpack"], tuple(paths))


def _literal(node: Any) -> str:
    """Source text of ``node``: dicts and lists as displays, strings as they are (they are source)."""
    if isinstance(node, str):
        return node
    if isinstance(node, list):
        return "[" + ", ".join(_literal(item) for item in node) + "]"
    return "{" + ", ".join(f"{key!r}: {_literal(value)}" for key, value in node.items()) + "}"
