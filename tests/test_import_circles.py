"""No import circle among globalstep's modules: every import at run time, at the top of a
module, inside a function or through ``importlib.import_module``, but the ones under
``if TYPE_CHECKING:``, counted as an arrow."""

from __future__ import annotations

import ast
import pathlib

import globalstep

ROOT = pathlib.Path(globalstep.__file__).parent

# Circles another part of issue 34 takes apart (the process group's): none may join them.
LEFT: list[set[str]] = []  # no circle is left


def _modules() -> dict[str, pathlib.Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(("globalstep", *parts)).removesuffix(".__init__")
        out[name] = path
    return out


def _type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(test or ast.Pass())


def _imported(tree: ast.AST, modules: dict[str, pathlib.Path]) -> set[str]:
    found: set[str] = set()
    todo = [tree]
    while todo:
        node = todo.pop()
        if _type_checking(node):
            continue
        todo.extend(ast.iter_child_nodes(node))
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            subs = [f"{node.module}.{alias.name}" for alias in node.names]
            names = [s for s in subs if s in modules]
            if len(names) < len(subs):
                names.append(node.module)
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names = [str(node.args[0].value)]
        found.update(n for n in names if n in modules)
    return found


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(component)

    for v in graph:
        if v not in index:
            visit(v)
    return out


def test_no_module_imports_itself_around_a_circle():
    """arrays <-> _rank_leaves and the four compat.optax modules (through importlib) were
    circles; none is left but those another part of the issue takes apart."""
    modules = _modules()
    graph = {
        name: _imported(ast.parse(path.read_text()), modules) - {name}
        for name, path in modules.items()
    }
    # An import inside a function is an arrow too (_reading imports distributed there).
    reading = graph["globalstep.checkpoint._directory.reading"]
    assert "globalstep.checkpoint._ranks.coordinated" in reading
    assert [c for c in _circles(graph) if c not in LEFT] == []
