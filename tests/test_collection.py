"""The root conftest.py's collection rules: a module that needs a missing extra skips.

Only a ``ModuleNotFoundError`` for a package of an extra that is not installed becomes a
skip; a typo or any other import failure stays a collection error, and a doctest whose
examples import a missing extra skips while the module's other doctests run.
"""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
ABSENT = "globalstep_absent_extra_pkg"  # no such package is installed anywhere


def load_rules():
    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def rules(monkeypatch):
    module = load_rules()
    monkeypatch.setitem(module.OPTIONAL, ABSENT, "absent")
    return module


def test_an_absent_optional_package_is_named(rules):
    """The missing package is found through the causes pytest and require() wrap it in."""
    cause = ModuleNotFoundError(f"No module named '{ABSENT}'", name=f"{ABSENT}.sub")
    wrapped = RuntimeError("collecting failed")
    wrapped.__cause__ = cause
    assert rules.missing_extra(wrapped) == ABSENT


def test_a_typo_or_another_error_is_not_a_missing_extra(rules):
    """A package outside the extras, or an error that is no missing module, stays an error."""
    assert rules.missing_extra(ModuleNotFoundError("No module named 'nmupy'", name="nmupy")) is None
    assert rules.missing_extra(ValueError("bad")) is None


def test_an_installed_optional_package_is_not_missing(rules, monkeypatch):
    """A package of an extra that is installed but failed to import is an error, not a skip."""
    monkeypatch.setitem(rules.OPTIONAL, "numpy", "core")
    assert rules.missing_extra(ModuleNotFoundError("No module named 'numpy'", name="numpy")) is None


def test_a_blocked_package_counts_as_absent(rules, monkeypatch):
    """``sys.modules[name] = None`` (imports of it blocked) reads as not installed."""
    monkeypatch.setitem(sys.modules, ABSENT, None)
    assert rules.missing_extra(ModuleNotFoundError(name=ABSENT)) == ABSENT


def test_collection_skips_what_needs_a_missing_extra_and_nothing_else(tmp_path):
    """End to end, in a pytest run of its own: skips named, a typo an error, doctests run."""
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\naddopts = --doctest-modules -rsE --continue-on-collection-errors\n"
    )
    (tmp_path / "conftest.py").write_text(
        (ROOT / "conftest.py").read_text() + f"\nOPTIONAL[{ABSENT!r}] = 'absent'\n"
    )
    (tmp_path / "needs_extra.py").write_text(f'"""Needs it."""\n\nimport {ABSENT}\n')
    (tmp_path / "test_needs_extra.py").write_text(
        f"import {ABSENT}\n\n\ndef test_never_collected():\n    pass\n"
    )
    (tmp_path / "typo.py").write_text('"""A typo."""\n\nimport globalstep_no_such_typo\n')
    (tmp_path / "docs.py").write_text(
        '"""Two doctests."""\n\n\n'
        f'def uses_it():\n    """\n    >>> import {ABSENT}\n    """\n\n\n'
        'def plain():\n    """\n    >>> 1 + 1\n    2\n    """\n'
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 1, out  # typo.py's collection error fails the run
    assert "ERROR typo.py" in out
    assert f"needs_extra.py needs `{ABSENT}`, which is not installed" in out
    assert f"test_needs_extra.py needs `{ABSENT}`, which is not installed" in out
    assert f"docs.py: its examples import `{ABSENT}`" in out
    assert "1 passed" in out  # plain()'s doctest
