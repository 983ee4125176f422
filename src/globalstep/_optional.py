"""Lazy imports of optional dependencies, with errors that name the extra to install."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from globalstep._errors import MissingDependencyError

__all__ = ["require", "require_installed"]


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """Imports ``module`` or raises an error that says which extra brings it.

    Args:
        module: the module to import, e.g. ``"torch"``.
        extra: the globalstep extra that installs it, e.g. ``"torch"``.
        purpose: what needs it, for the message, e.g. ``"globalstep.integrations.torch"``.

    Raises:
        MissingDependencyError: the module is not installed.

    Example:
        >>> require("json", "core", "this example").__name__
        'json'
    """
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise MissingDependencyError(module, extra, purpose) from err


def require_installed(module: str, extra: str, purpose: str) -> None:
    """Checks that ``module`` is installed, without importing it (for a module a
    background thread imports later).

    Raises:
        MissingDependencyError: the module is not installed.

    Example:
        >>> require_installed("json", "core", "this example")
    """
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent missing, or sys.modules[module] = None
        found = False
    if not found:
        raise MissingDependencyError(module, extra, purpose)
