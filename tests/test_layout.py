"""The layout's rules, read from the source with ``ast``: no package of ``dmlfe`` reaches
into another one's private names, tests take their helpers from ``helpers.py``, and the
modules that moved are still importable from their old paths."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest
from helpers import ROOT

PACKAGE = ROOT / "dmlfe"

#: (importing file, imported dotted name) pairs allowed for now, each with its reason.
KNOWN: set[tuple[str, str]] = set()

_DOTTED = re.compile(r"dmlfe(\.[A-Za-z_][A-Za-z0-9_]*)+")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _owner(dotted: str) -> str:
    """The part of the package a name belongs to: ``dmlfe.x`` of ``dmlfe.x.y...``."""
    return ".".join(dotted.split(".")[:2])


def _is_private(dotted: str) -> bool:
    return any(part.startswith("_") and not part.startswith("__") and part != "_version"
               for part in dotted.split(".")[1:])


def private_imports(source: str, module: str, is_package: bool = False) -> list[str]:
    """Dotted names of private ``dmlfe`` objects that ``module`` (whose source is given)
    takes from another part of the package: by ``import``, ``from ... import``, an
    attribute of a name so imported, or a module name in a string (``import_module``)."""
    tree = ast.parse(source)
    here = module.split(".") if is_package else module.split(".")[:-1]
    bound: dict[str, str] = {}  # local name -> the dotted name it was imported as
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "dmlfe":
                    # "import dmlfe.a.b" binds dmlfe; "import dmlfe.a.b as m" binds m
                    bound[alias.asname or "dmlfe"] = alias.name if alias.asname else "dmlfe"
                    imported.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolved against the importing module's package
                base = ".".join(here[:len(here) - node.level + 1] + ([base] if base else []))
            if base.split(".")[0] == "dmlfe":
                for alias in node.names:
                    bound[alias.asname or alias.name] = f"{base}.{alias.name}"
    used = imported | set(bound.values())
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in bound):
            used.add(f"{bound[node.value.id]}.{node.attr}")
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and _DOTTED.fullmatch(node.value)):
            used.add(node.value)
    return sorted(name for name in used
                  if _is_private(name) and _owner(name) != _owner(module))


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_package_imports_another_ones_private_names():
    found = set()
    for path in _sources():
        module = _module_name(path)
        for name in private_imports(path.read_text(), module, path.name == "__init__.py"):
            found.add((path.relative_to(ROOT).as_posix(), name))
    new = sorted(found - KNOWN)
    assert not new, (
        "private names imported across packages (make the name public in its home module "
        "or move it to the package that uses it): "
        + "; ".join(f"{path} takes {name}" for path, name in new))
    fixed = sorted(KNOWN - found)
    assert not fixed, f"no longer imported, remove from KNOWN in {__file__}: {fixed}"


@pytest.mark.parametrize(("source", "module", "expected"), [
    ("from dmlfe.stats.cache import _digest", "dmlfe.graph.knn",
     ["dmlfe.stats.cache._digest"]),
    ("from dmlfe.store import _format as F", "dmlfe.projection", ["dmlfe.store._format"]),
    ("from dmlfe.evaluation._common import as_features", "dmlfe.selection.grroor",
     ["dmlfe.evaluation._common.as_features"]),
    ("import dmlfe.store._format", "dmlfe.cli", ["dmlfe.store._format"]),
    ("from dmlfe.stats import cache\ncache._digest(1)", "dmlfe.graph.knn",
     ["dmlfe.stats.cache._digest"]),
    ("import importlib\nimportlib.import_module('dmlfe.evaluation._common')", "dmlfe.cli",
     ["dmlfe.evaluation._common"]),
    ("from ..stats.cache import _digest", "dmlfe.graph.knn", ["dmlfe.stats.cache._digest"]),
    # allowed: within one package, the version, dunders, public names
    ("from dmlfe.store import _format", "dmlfe.store.reader", []),
    ("from ._format import ENC", "dmlfe.store.reader", []),
    ("from dmlfe._version import __version__", "dmlfe.cli", []),
    ("from dmlfe.stats.pass_ import compute_stats", "dmlfe.fit.run", []),
    ("import dmlfe.store\ndmlfe.store.__getattr__", "dmlfe.cli", []),
])
def test_the_check_sees_private_imports(source, module, expected):
    assert private_imports(source, module) == expected


def test_tests_take_helpers_from_the_helpers_module():
    # conftest.py holds the fixtures; it still re-exports the helpers for old code
    old = [p.name for p in sorted((ROOT / "tests").glob("*.py"))
           if p.name != "conftest.py" and re.search(r"^\s*from (tests\.)?conftest import",
                                                   p.read_text(), re.MULTILINE)]
    assert not old, f"import the helpers with 'from helpers import ...' in: {old}"


@pytest.mark.parametrize(("old", "new"), [
    ("dmlfe.solvers.partial", "dmlfe.solvers.leading"),
    ("dmlfe.store._format", "dmlfe.store.layout"),
    ("dmlfe.cluster_profiles", "dmlfe.cluster.profiles"),
])
def test_moved_modules_keep_their_old_paths(old, new, monkeypatch):
    old_module, new_module = importlib.import_module(old), importlib.import_module(new)
    assert old_module is new_module
    # a name patched through the old path is the one the module's own code reads
    name = next(n for n in vars(new_module) if n.isupper())
    monkeypatch.setattr(old_module, name, "patched")
    assert getattr(new_module, name) == "patched"


def test_old_solver_path_gives_the_same_functions():
    from dmlfe.solvers import leading
    from dmlfe.solvers.partial import FULL_SPECTRUM_LIMIT, leading_eigh

    assert leading_eigh is leading.leading_eigh
    assert FULL_SPECTRUM_LIMIT == leading.FULL_SPECTRUM_LIMIT
