"""The house rules of harness/, read from its imports (every import statement, at any depth, as
``python3 -c`` would see them): no import cycle; packages import only the layers below them; each
package shows a public face (``__all__``) whose names resolve."""

from __future__ import annotations

import ast
import functools
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "harness"

# Bottom to top: a module may import its own layer and the layers before it, never one after it.
LAYERS = [
    {"errors", "suggest", "registry", "records", "heap", "_face", "textfile", "redact", "cachedir"},
    {"curriculum", "losses", "tracking"},
    {"metrics"},
    {"results"},
    {"stats"},
    {"present"},
    {"analysis"},
    {"data"},
    {"config"},
    {"model"},
    {"training"},
    {"study"},
    {"driver"},
    {"jobs"},
    {"cli", "__init__", "__main__"},
]
LEVEL = {name: i for i, layer in enumerate(LAYERS) for name in layer}
PACKAGES = sorted(p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file())


def _modules() -> dict[str, Path]:
    mods = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        mods[name] = path
    return mods


@functools.cache
def _trees() -> dict[str, tuple[Path, ast.Module]]:
    """Every module's path and syntax tree, parsed once for the module's tests (they only read them)."""
    return {name: (path, ast.parse(path.read_text(encoding="utf-8"))) for name, path in _modules().items()}


@functools.cache
def _graph() -> dict[str, set[str]]:
    """Module -> the harness modules it imports (a name imported from a package counts as its module
    where one has that name, else as the package). Read once; the tests only read it."""
    mods = _modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for name, (path, tree) in _trees().items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for target in targets:
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != name and target != "harness":
                    edges[name].add(target)
    return edges


def _area(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_the_graph_is_read_from_the_whole_package() -> None:
    edges = _graph()
    assert len(edges) > 100 and sum(map(len, edges.values())) > 300  # not vacuous
    assert {_area(m) for m in edges} <= set(LEVEL), "a new package or top-level module needs a layer"


def test_no_import_cycle() -> None:
    edges = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in edges:
        if v not in index:
            visit(v)
    assert cycles == []


def test_layers_import_only_downward() -> None:
    upward = sorted(f"{m} -> {t}" for m, targets in _graph().items() for t in targets
                    if LEVEL[_area(t)] > LEVEL[_area(m)])
    assert upward == []


def test_nothing_below_the_cli_imports_it() -> None:
    assert not [m for m, ts in _graph().items() if _area(m) != "cli" and any(_area(t) == "cli" for t in ts)
                and m != "harness"]


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_shows_a_face_whose_names_resolve(package: str) -> None:
    module = importlib.import_module(f"harness.{package}")
    assert module.__doc__ and module.__doc__.strip()
    names = getattr(module, "__all__", None)
    assert names, f"harness.{package} has no __all__"
    for name in names:
        assert getattr(module, name) is not None, name


def _private(module: str) -> bool:
    return any(part.startswith("_") and part != "__init__" for part in module.split(".")[1:])


def test_no_package_imports_another_packages_private_module() -> None:
    """``_x`` modules are internal to their package: another package imports only public ones."""
    crossing = sorted(f"{m} -> {t}" for m, targets in _graph().items() for t in targets
                      if _private(t) and _area(t) != _area(m) and t != "harness._face")
    assert crossing == []


def test_the_private_rule_is_not_vacuous() -> None:
    edges = _graph()
    inside = [t for m, ts in edges.items() for t in ts if _private(t) and _area(t) == _area(m)]
    assert len(inside) > 10  # private modules exist and are used within their package


def test_no_package_imports_another_packages_private_names() -> None:
    """``from harness.x.y import _name`` only inside package x."""
    crossing = []
    for name, (_, tree) in _trees().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("harness."):
                if _area(node.module) == _area(name):
                    continue
                crossing += [f"{name} -> {node.module}.{a.name}" for a in node.names
                             if a.name.startswith("_") and not a.name.startswith("__")]
    assert crossing == []
