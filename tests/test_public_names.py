"""The public face: one door per package (issue 34), and the old paths for one release.

``tests/data/doors.json`` is the snapshot of the doors: every public module (a package's
``__init__``, or a framework's module in ``compat``/``integrations``) and its ``__all__``;
``python tests/test_public_names.py`` writes it again after a deliberate change.
``tests/data/public_names.json`` was written on main at 5d95193, before the redesign
(issue 26): every module and name it lists still imports from its old path, with a
``DeprecationWarning`` naming its door where the module went private.
"""

from __future__ import annotations

import importlib
import json
import pathlib
import pkgutil
import sys
import warnings

import pytest

import globalstep
from globalstep import _aliases

DOORS = pathlib.Path(__file__).parent / "data" / "doors.json"
OLD = pathlib.Path(__file__).parent / "data" / "public_names.json"


def public_modules() -> list[str]:
    names = ["globalstep"]
    for info in pkgutil.walk_packages(globalstep.__path__, "globalstep."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return sorted(names)


def exported(name: str) -> list[str] | None:
    module = importlib.import_module(name)
    names = getattr(module, "__all__", None)
    return None if names is None else sorted(names)


def test_the_public_modules_are_the_doors() -> None:
    assert public_modules() == sorted(json.loads(DOORS.read_text()))


@pytest.mark.parametrize("name", sorted(json.loads(DOORS.read_text())))
def test_each_door_keeps_its_names(name: str) -> None:
    expected = json.loads(DOORS.read_text())[name]
    try:
        names = exported(name)
    except ImportError as error:  # an optional framework this checkout lacks
        if (error.name or "").startswith("globalstep"):
            raise
        pytest.skip(f"{name}: {error}")
    assert names == expected
    module = importlib.import_module(name)
    for attribute in names or []:
        assert hasattr(module, attribute), f"{name}.{attribute}"


@pytest.mark.parametrize("name", sorted(json.loads(OLD.read_text())))
def test_every_old_path_still_imports_its_names(name: str) -> None:
    expected = json.loads(OLD.read_text())[name] or []
    if name in _aliases.OLD:
        sys.modules.pop(name, None)  # imported earlier in this session: import it afresh
        door = _aliases.OLD[name][0]
        with pytest.warns(DeprecationWarning, match=rf"`{name}` is deprecated.*{door}"):
            module = importlib.import_module(name)
    else:
        try:
            module = importlib.import_module(name)  # a door: no warning
        except ImportError as error:
            if (error.name or "").startswith("globalstep"):
                raise
            pytest.skip(f"{name}: {error}")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        missing = [attribute for attribute in expected if not hasattr(module, attribute)]
    assert missing == []


def test_the_alias_table_names_only_modules_that_went() -> None:
    for old, (_door, homes) in _aliases.OLD.items():
        for home in homes:
            importlib.import_module(home)
        assert old not in public_modules()


if __name__ == "__main__":
    snapshot = {name: exported(name) for name in public_modules()}
    DOORS.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n")
    sys.exit(0)
