"""A pytest plugin that runs optax's own schedule tests against globalstep.compat.optax.

Loaded with ``-p tests.compat.optax_peer_redirect`` by :mod:`tests.compat.test_optax_peer`
in a subprocess that collects the test files optax's wheel ships
(``optax/schedules/_schedule_test.py``, ``_join_test.py``) from the installed package. Before
they are imported, ``optax.schedules._schedule`` and ``optax.schedules._join`` (the modules
those files import the schedules from) are swapped for modules holding compat's functions;
nothing of optax is copied here. Tests that cannot pass for a reason outside the schedules
are skipped, each with its reason, listed in :data:`SKIPS`.
"""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

# Test id (as pytest names it, without the file) -> why it is skipped. Empty: none is.
SKIPS: dict[str, str] = {}

_SAVED: dict[str, Any] = {}


def pytest_configure(config: pytest.Config) -> None:
    """Swaps optax's schedule modules for compat's before the test files are imported."""
    del config
    import optax.schedules as package

    from globalstep.compat import optax as compat

    for name, exports in (
        ("_schedule", [n for n in compat.__all__ if n[0].islower() and n != "join_schedules"]),
        ("_join", ["join_schedules"]),
    ):
        shim = types.ModuleType(f"optax.schedules.{name}")
        shim.__doc__ = f"globalstep.compat.optax standing in for optax.schedules.{name}"
        for export in exports:
            setattr(shim, export, getattr(compat, export))
        full = f"optax.schedules.{name}"
        _SAVED[name] = getattr(package, name)
        setattr(package, name, shim)
        sys.modules[full] = shim


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks the skipped tests with their reasons, and puts optax's modules back (the test
    files hold the shims by now)."""
    import optax.schedules as package

    for name, module in _SAVED.items():
        setattr(package, name, module)
        sys.modules[f"optax.schedules.{name}"] = module
    for item in items:
        reason = SKIPS.get(item.nodeid.split("::", 1)[-1])
        if reason:
            item.add_marker(pytest.mark.skip(reason=reason))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Says in the summary that the schedules were globalstep's, and lists SKIPS."""
    terminalreporter.write_line(
        "optax.schedules._schedule and ._join redirected to globalstep.compat.optax"
    )
    for test, reason in SKIPS.items():
        terminalreporter.write_line(f"skipped by globalstep: {test}: {reason}")
