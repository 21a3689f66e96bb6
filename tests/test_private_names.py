"""Other libraries' private names (``helpers.private_names`` says which count): touched only in the compat
modules, and per library at most a budget."""

from __future__ import annotations

import ast

import pytest

from helpers.private_names import COMPAT, Reach, all_reaches, defined_names, project_names, reaches, sources

# Reaches outside the compat modules today, each to move into one or remove (issue 26); a new one fails.
OUTSIDE: dict[str, set[str]] = {}

# Distinct private names per library, at most: the counts of 2026-12-06, 16 in all (issue 26's budget: 25 in all,
# none of torchdata's). docs/design.md "Where we reach into a framework" gives each name's reason.
BUDGET = {
    "lightning": 9,
    "ignite": 1,
    "accelerate": 4,
    "torch": 1,
    "torchdata": 0,
    "tqdm": 1,
    "others": 0,
}


def outside_compat(found: tuple[Reach, ...] | list[Reach]) -> list[str]:
    """The reaches neither in a compat module nor listed in ``OUTSIDE``, as ``path:line: name (library)``."""
    return [
        str(reach) for reach in found if reach.path not in COMPAT and reach.name not in OUTSIDE.get(reach.path, set())
    ]


def test_private_names_of_other_libraries_are_touched_only_in_the_compat_modules() -> None:
    assert outside_compat(all_reaches()) == [], "move these into a compat module (or use a public mechanism)"


def test_each_reach_listed_outside_the_compat_modules_is_still_there() -> None:
    found = {(reach.path, reach.name) for reach in all_reaches()}
    gone = sorted(f"{path}: {name}" for path, names in OUTSIDE.items() for name in names if (path, name) not in found)
    assert gone == [], "no longer there: remove them from OUTSIDE"


@pytest.mark.parametrize("library", sorted(BUDGET))
def test_each_library_has_at_most_its_budget_of_distinct_private_names(library: str) -> None:
    first: dict[str, Reach] = {}
    for reach in all_reaches():
        if library in reach.libraries:
            first.setdefault(reach.name, reach)
    assert len(first) <= BUDGET[library], f"{library}: {len(first)} private names, budget {BUDGET[library]}:\n" + (
        "\n".join(str(first[name]) for name in sorted(first))
    )


def test_every_reach_belongs_to_a_library_with_a_budget() -> None:
    assert {library for reach in all_reaches() for library in reach.libraries} <= set(BUDGET)


PLANTED = "tracker_core/display/_planted.py"


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import tqdm\n\nopen_bars = tqdm.tqdm._instances\n", [f"{PLANTED}:3: _instances (tqdm)"]),
        (
            "import pytorch_lightning as pl\n\ndef mode(trainer: pl.Trainer | None):\n    return trainer._mode\n",
            [f"{PLANTED}:4: _mode (lightning)"],
        ),
        ("def drop(loader):\n    loader._iterator = None\n", [f"{PLANTED}:2: _iterator (others)"]),
        ("def build(loader):\n    return loader._get_iterator()\n", [f"{PLANTED}:2: _get_iterator (others)"]),
        ("def name(writer):\n    return getattr(writer, '_file_name', None)\n", [f"{PLANTED}:2: _file_name (others)"]),
        ("def has(writer):\n    return hasattr(writer, '_file_name')\n", [f"{PLANTED}:2: _file_name (others)"]),
        (
            "def hook(loader):\n    return loader.__dict__.get('_get_iterator')\n",
            [f"{PLANTED}:2: _get_iterator (others)"],
        ),
        (
            "from torch.utils.data.dataloader import _BaseDataLoaderIter\n",
            [f"{PLANTED}:1: _BaseDataLoaderIter (torch)"],
        ),
        (
            "def state(batches):\n    cls = type(batches)\n    return cls._SAMPLES_YIELDED\n",
            [f"{PLANTED}:3: _SAMPLES_YIELDED (others)"],
        ),
        ("import torch._dynamo\n", [f"{PLANTED}:1: _dynamo (torch)"]),
        (
            "from torch.utils.data._utils.fetch import Fetcher\n",
            [f"{PLANTED}:1: _utils (torch)"],
        ),
        ("import importlib\n\nimportlib.import_module('torch._dynamo')\n", [f"{PLANTED}:3: _dynamo (torch)"]),
        (
            "import importlib\n\nloop = importlib.import_module('pytorch_lightning.loops.fit_loop')._FitLoop\n",
            [f"{PLANTED}:3: _FitLoop (lightning)"],
        ),
    ],
)
def test_an_access_planted_outside_a_compat_module_is_named_by_file_line_and_name(
    source: str, expected: list[str]
) -> None:
    assert outside_compat(reaches(PLANTED, source, project_names())) == expected


def test_the_projects_own_private_names_are_not_counted() -> None:
    source = (
        "from tracker_core.counting import _stage\n"
        "\n"
        "class Box:\n"
        "    def __init__(self):\n"
        "        self._kept = 1\n"
        "\n"
        "def read(box, tracker, counts, scheduler):\n"
        "    setattr(scheduler, '_tracker_core_counts', 1)\n"
        "    return box._kept, tracker._progress, counts._replace(ready=1), _stage._private_helper\n"
    )
    ours = project_names() | defined_names(ast.parse(source))
    assert reaches(PLANTED, source, ours) == []


def test_in_a_compat_module_a_name_counts_for_the_library_it_is_declared_on() -> None:
    source = (
        "import torch\n"
        "from accelerate.accelerator import Accelerator\n"
        "\n"
        "def drop(loader, accelerator):\n"
        "    loader._iterator = None\n"
        "    return accelerator._models, accelerator._extra\n"
        "\n"
        "check_attributes('accelerate', '1', {'Accelerator': (Accelerator, ('_models',)),\n"
        "                  'DataLoader': (torch.utils.data.DataLoader, ('_iterator',))})\n"
    )
    found = reaches("integrations/accelerate/_compat.py", source, project_names())
    assert [(reach.name, set(reach.libraries)) for reach in found] == [
        ("_iterator", {"torch"}),
        ("_extra", {"accelerate"}),
        ("_models", {"accelerate"}),
    ]


def test_no_object_has_its_class_swapped() -> None:
    swapped = {
        path
        for path, source in sources().items()
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Attribute) and target.attr == "__class__"
    }
    assert swapped == set()
