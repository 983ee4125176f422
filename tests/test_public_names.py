"""The public names stay as they were: ``__all__`` of every public module.

``tests/data/public_names.json`` was written on main at 5d95193, before the redesign
(issue 26), by ``python tests/test_public_names.py``. A module may move its code elsewhere,
but it keeps answering the names it answered.
"""

from __future__ import annotations

import importlib
import json
import pathlib
import pkgutil
import sys

import pytest

import globalstep

SNAPSHOT = pathlib.Path(__file__).parent / "data" / "public_names.json"


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


@pytest.mark.parametrize("name", sorted(json.loads(SNAPSHOT.read_text())))
def test_public_module_keeps_its_names(name: str) -> None:
    expected = json.loads(SNAPSHOT.read_text())[name]
    try:
        names = exported(name)
    except ImportError as error:  # an optional framework this checkout lacks
        if (error.name or "").startswith("globalstep"):
            raise  # a public module that went away
        pytest.skip(f"{name}: {error}")
    # Every name recorded is still answered; new public names may come (issue 27's PerRank).
    if expected is not None:
        assert names is not None, f"{name} lost its __all__"
        assert sorted(set(expected) - set(names)) == [], f"{name} lost public names"
    module = importlib.import_module(name)
    for attribute in names or []:
        assert hasattr(module, attribute), f"{name}.{attribute}"


def test_the_snapshot_holds_the_modules_of_5d95193() -> None:
    """New public modules may come (globalstep.storage); none recorded may go."""
    recorded = set(json.loads(SNAPSHOT.read_text()))
    assert len(recorded) == 43
    assert recorded <= set(public_modules())


if __name__ == "__main__":
    snapshot = {name: exported(name) for name in public_modules()}
    SNAPSHOT.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n")
    sys.exit(0)
