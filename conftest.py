"""Collection in a checkout with any subset of the extras: a module that needs one skips.

pytest imports every module under ``tests/`` and ``src/`` (``--doctest-modules``), so a
module that imports a framework at its top (``globalstep.integrations.torch``, a Keras
training script that a test runs in a subprocess) cannot even be collected where that
framework is not installed. Here, and only here, such a collection error becomes a skip
that names the module and the missing package, reported by ``-ra`` like a test's
``pytest.importorskip``.

Strict on purpose: only a ``ModuleNotFoundError`` for a package of an extra
(``OPTIONAL``) that is truly absent (``importlib.util.find_spec`` finds nothing) is turned
into a skip. A typo, a missing core dependency, a framework that is installed but fails
to import, or any other error stays a collection error. Test modules mostly skip
themselves with ``pytest.importorskip``; this covers the rest: framework modules' doctests
and the scripts the tests run.

A doctest of a module that imports fine may still import a framework in its examples
(``>>> import torch.distributed as dist``): it skips, by the same rule, where that
package is absent.

It lives at the repository root, not in ``tests/conftest.py``, since pytest only applies a
conftest's hooks below its own folder, and ``src/`` is collected too.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Callable, Generator, Iterable
from pathlib import Path

import pytest

# Import name -> the extra that installs it (pyproject.toml's optional-dependencies).
OPTIONAL = {
    "torch": "torch",
    "tensorflow": "tf",
    "keras": "keras",
    "jax": "jax",
    "jaxlib": "jax",
    "optax": "jax",
    "tensorboard": "tensorboard",
    "google_crc32c": "tensorboard",
    "tensorboardX": "dev",
    "matplotlib": "plot",
    "rich": "progress",
    "s3fs": "s3",
    "moto": "dev",
    "ml_dtypes": "bf16",
    "safetensors": "dev",
    "mlflow": "mlflow",
    "wandb": "wandb",
    "sklearn": "dev",
}


def missing_extra(error: BaseException) -> str | None:
    """The absent optional package whose import raised ``error`` (or its causes), if any.

    Args:
        error: what collecting a module raised; pytest wraps a test module's
            ``ImportError`` in a ``CollectError``, and ``globalstep._optional.require``
            wraps it in a ``MissingDependencyError``, so the causes are followed.

    Returns:
        The top-level import name (``"torch"``) when the chain holds a
        ``ModuleNotFoundError`` for a package of ``OPTIONAL`` that is not installed;
        otherwise None.
    """
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ModuleNotFoundError) and current.name:
            top = _absent(current.name)
            if top is not None:
                return top
        current = current.__cause__ or current.__context__
    return None


def _absent(name: str) -> str | None:
    """The top-level package of ``name`` if it is one of ``OPTIONAL`` and not installed."""
    top = name.partition(".")[0]
    if top not in OPTIONAL:
        return None
    try:
        found = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):  # sys.modules[top] is None: imports of it are blocked
        found = False
    return None if found else top


def _imported_by(source: str) -> list[str]:
    """The modules that a piece of source imports, by absolute name."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
    return names


def _skipping_missing_extras(
    collect: Callable[[], Iterable[pytest.Item | pytest.Collector]], path: Path, root: Path
) -> Callable[[], list[pytest.Item | pytest.Collector]]:
    def guarded() -> list[pytest.Item | pytest.Collector]:
        try:
            return list(collect())
        except Exception as error:
            name = missing_extra(error)
            if name is None:
                raise
            where = path.relative_to(root) if path.is_relative_to(root) else path
            pytest.skip(
                f"{where} needs `{name}`, which is not installed"
                f" (pip install 'globalstep[{OPTIONAL[name]}]')"
            )

    return guarded


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(
    file_path: Path, parent: pytest.Collector
) -> Generator[None, list[pytest.Collector], list[pytest.Collector]]:
    """Makes every collector of a ``.py`` file skip when the file needs a missing extra."""
    collectors: list[pytest.Collector] = yield
    if file_path.suffix == ".py":
        for collector in collectors:
            collector.collect = _skipping_missing_extras(  # type: ignore[method-assign]
                collector.collect, file_path, parent.config.rootpath
            )
    return collectors


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skips each doctest whose examples import an optional package that is absent."""
    for item in items:
        test = getattr(item, "dtest", None)  # a DoctestItem's doctest.DocTest
        if test is None:
            continue
        for example in test.examples:
            missing = next(filter(None, map(_absent, _imported_by(example.source))), None)
            if missing is not None:
                item.add_marker(
                    pytest.mark.skip(
                        reason=f"its examples import `{missing}`, which is not installed"
                        f" (pip install 'globalstep[{OPTIONAL[missing]}]')"
                    )
                )
                break
