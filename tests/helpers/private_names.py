"""Finding the private names of other libraries that the project's modules touch (``tests/test_private_names.py``).

A private name is a ``_x`` name (not a dunder) of a library the project does not own: an attribute read,
written or called on an object that is not a method's ``self``/``cls``, a ``getattr``/``setattr``/``hasattr``/
``delattr`` or ``__dict__`` lookup of a literal ``"_x"``, an imported ``_x`` name or ``_x`` module, a private
class named. The project's own private names are not counted: those a module of it (other than a compat
module) defines, and ``_tracker_core*`` (the attributes it sets on others' objects). Inside a compat module
every private attribute on another object counts, for the library whose class the module declares it on (its
import check); outside, an access is reported when the object's library is known (a module imported from it,
a parameter annotated with its type) or the project does not define the name.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The compat modules, each with the library its undeclared private attributes belong to.
COMPAT = {
    "integrations/lightning/_compat.py": "lightning",
    "integrations/ignite/_compat.py": "ignite",
    "integrations/accelerate/_compat.py": "accelerate",
    "tracker_core/data/_torch_compat.py": "torch",
    "tracker_core/display/_tqdm_compat.py": "tqdm",
}

LIBRARIES = {
    "pytorch_lightning": "lightning",
    "lightning": "lightning",
    "lightning_fabric": "lightning",
    "ignite": "ignite",
    "accelerate": "accelerate",
    "torch": "torch",
    "torchdata": "torchdata",
    "tqdm": "tqdm",
}
FRAMEWORK_FOLDERS = {
    "integrations/lightning/": "lightning",
    "integrations/ignite/": "ignite",
    "integrations/accelerate/": "accelerate",
}
OURS = "tracker_core"
# Documented API of namedtuple (the project's count tuples are NamedTuples).
PUBLIC_UNDERSCORED = {"_asdict", "_field_defaults", "_fields", "_make", "_replace"}
ATTRIBUTE_FUNCTIONS = {"getattr", "setattr", "hasattr", "delattr"}


@dataclass(frozen=True)
class Reach:
    path: str
    line: int
    name: str
    libraries: frozenset[str]

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.name} ({', '.join(sorted(self.libraries))})"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _library(module: str) -> str:
    root = module.split(".")[0]
    return OURS if root == OURS else LIBRARIES.get(root, "others")


def sources() -> dict[str, str]:
    """The project's sources by path (``tracker_core/``, ``integrations/``)."""
    paths = [*ROOT.glob("tracker_core/**/*.py"), *ROOT.glob("integrations/**/*.py")]
    return {path.relative_to(ROOT).as_posix(): path.read_text() for path in sorted(paths)}


def defined_names(tree: ast.AST) -> set[str]:
    """Every name ``tree`` defines: functions, classes, variables, arguments, import aliases, attributes set on
    ``self``/``cls``."""
    selves = _selves(tree)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias) and node.asname:
            names.add(node.asname)
        elif isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load) and node.value in selves:
            names.add(node.attr)
    return names


@functools.cache
def project_names() -> frozenset[str]:
    """The names the project defines outside its compat modules (and its modules' and packages' names)."""
    names: set[str] = set()
    for path, source in sources().items():
        names.update(Path(path).parent.parts)
        names.add(Path(path).stem)
        if path not in COMPAT:
            names |= defined_names(ast.parse(source))
    return frozenset(names)


def _selves(tree: ast.AST) -> set[ast.expr]:
    """The ``Name`` nodes that are a method's first parameter (``self``, ``cls``) inside that method."""
    selves: set[ast.expr] = set()
    for owner in ast.walk(tree):
        if not isinstance(owner, ast.ClassDef):
            continue
        for method in owner.body:
            if not isinstance(method, ast.FunctionDef | ast.AsyncFunctionDef) or not method.args.args:
                continue
            first = method.args.args[0].arg
            selves.update(node for node in ast.walk(method) if isinstance(node, ast.Name) and node.id == first)
    return selves


def _imported(tree: ast.AST) -> dict[str, str]:
    """Local name -> the module (or module.name) it is bound to, over every scope of ``tree``."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound[alias.asname or alias.name.split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0]
                )
        elif isinstance(node, ast.ImportFrom):
            module = OURS if node.level else node.module or ""
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{module}.{alias.name}"
    return bound


def _module_named(node: ast.expr) -> str | None:
    """The module ``importlib.import_module("...")`` or ``sys.modules.get("...")`` names literally, or None."""
    if not isinstance(node, ast.Call) or not node.args:
        return None
    func, first = node.func, node.args[0]
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name not in ("import_module", "get", "__import__"):
        return None
    if name == "get" and not (isinstance(func, ast.Attribute) and ast.unparse(func.value) == "sys.modules"):
        return None
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return ""  # an f-string: which module is not known here


def _receiver_library(node: ast.expr, imported: dict[str, str]) -> str | None:
    """The library of the module an expression's root is imported from, or None where it is not known."""
    while True:
        module = _module_named(node)
        if module is not None:
            return _library(module) if module else None
        if isinstance(node, ast.Attribute | ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Name):
            return _library(imported[node.id]) if node.id in imported else None
        else:
            return None


def _typed(tree: ast.AST, imported: dict[str, str]) -> dict[ast.expr, str]:
    """Each use of a parameter annotated with a framework's type (``trainer: pl.Trainer``) -> that framework."""
    typed: dict[ast.expr, str] = {}
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for argument in [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]:
            libraries = {
                _receiver_library(part, imported)
                for part in ast.walk(argument.annotation or ast.Constant(None))
                if isinstance(part, ast.Name | ast.Attribute)
            } & set(LIBRARIES.values())
            if len(libraries) != 1:
                continue
            (library,) = libraries
            for node in ast.walk(function):
                if isinstance(node, ast.Name) and node.id == argument.arg:
                    typed[node] = str(library)
    return typed


def _declared(tree: ast.AST, imported: dict[str, str], default: str) -> dict[str, set[str]]:
    """Name -> the libraries a compat module's import check declares it on: ``{Owner: ("_x", ...)}`` or
    ``{"Owner": (Owner, ("_x", ...))}`` entries, an owner of unknown origin counting as ``default``'s."""

    def names(node: ast.expr | None) -> list[str] | None:
        if not isinstance(node, ast.Tuple):
            return None
        listed = [name for name in map(_literal, node.elts) if name is not None]
        return listed if len(listed) == len(node.elts) else None

    declared: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values, strict=True):
            owner, listed = key, names(value)
            if listed is None and isinstance(value, ast.Tuple) and len(value.elts) == 2:
                owner, listed = value.elts[0], names(value.elts[1])
            if listed is None or owner is None:
                continue
            library = _receiver_library(owner, imported) or default
            for name in listed:
                declared.setdefault(name, set()).add(library)
    return declared


def _accessed(tree: ast.AST) -> Iterator[tuple[int, str, ast.expr]]:
    """(line, name, receiver) of each ``_x`` attribute access, literal attribute function or ``__dict__`` lookup."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in PUBLIC_UNDERSCORED:
            yield node.lineno, node.attr, node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ATTRIBUTE_FUNCTIONS:
            name = _literal(node.args[1]) if len(node.args) >= 2 else None
            if name is not None and _private(name):
                yield node.lineno, name, node.args[0]
        elif isinstance(node, ast.Call | ast.Subscript):
            dictionary, name = _dict_lookup(node)
            if isinstance(dictionary, ast.Attribute) and dictionary.attr == "__dict__" and name and _private(name):
                yield node.lineno, name, dictionary.value


def _dict_lookup(node: ast.Call | ast.Subscript) -> tuple[ast.expr | None, str | None]:
    """``(d, "k")`` for ``d.get("k")`` and ``d["k"]``, else ``(None, None)``."""
    if isinstance(node, ast.Subscript):
        return node.value, _literal(node.slice)
    if isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args:
        return node.func.value, _literal(node.args[0])
    return None, None


def _literal(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _imports(tree: ast.AST) -> Iterator[tuple[int, str, str]]:
    """(line, private name, library) of each private module part or name imported from another library."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            modules, names = [node.module], [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            modules, names = [alias.name for alias in node.names], []
        elif isinstance(node, ast.Call) and _module_named(node):
            modules, names = [str(_module_named(node))], []
        else:
            continue
        for module in modules:
            library = _library(module)
            if library == OURS:
                continue
            for part in [*module.split(".")[1:], *names]:
                if _private(part):
                    yield node.lineno, part, library


def reaches(path: str, source: str, ours: frozenset[str]) -> list[Reach]:
    """Every private name of another library that ``source`` (the module at ``path``) touches."""
    tree = ast.parse(source)
    imported, selves = _imported(tree), _selves(tree)
    typed = _typed(tree, imported)
    compat = path in COMPAT
    default = COMPAT.get(path) or next(
        (library for folder, library in FRAMEWORK_FOLDERS.items() if path.startswith(folder)), "others"
    )
    declared = _declared(tree, imported, default) if compat else {}
    found = [Reach(path, line, name, frozenset({library})) for line, name, library in _imports(tree)]
    for line, name, receiver in _accessed(tree):
        library = _receiver_library(receiver, imported)
        if library == OURS or receiver in selves or name.startswith("_tracker_core"):
            continue
        if library is None and receiver not in typed and not compat and name in ours:
            continue
        libraries = {library} if library else declared.get(name) or {typed.get(receiver, default)}
        found.append(Reach(path, line, name, frozenset(libraries)))
    return sorted(found, key=lambda reach: (reach.line, reach.name))


@functools.cache
def all_reaches() -> tuple[Reach, ...]:
    return tuple(reach for path, source in sources().items() for reach in reaches(path, source, project_names()))
