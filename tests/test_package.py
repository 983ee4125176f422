"""Tests for the package as a whole: public names, light import, optional extras."""

import subprocess
import sys

import pytest

import globalstep
from globalstep import MissingDependencyError
from globalstep._optional import require


def test_all_is_sorted_and_complete():
    """__all__ is sorted and every name in it exists."""
    assert list(globalstep.__all__) == sorted(globalstep.__all__)
    for name in globalstep.__all__:
        assert hasattr(globalstep, name), name


@pytest.mark.parametrize(
    "name", ["Clock", "Progress", "Duration", "every", "at", "once", "any_of", "all_of"]
)
def test_core_names_are_public(name):
    """The foundation's names import from the top-level package."""
    assert name in globalstep.__all__


def test_import_loads_no_framework():
    """`import globalstep` in a fresh interpreter imports no ML framework."""
    code = (
        "import sys, globalstep, globalstep._cli\n"
        "heavy = {'torch', 'tensorflow', 'jax', 'keras', 'optax', 'tensorboard', 'matplotlib'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_missing_extra_names_pip_install():
    """A missing optional module raises an ImportError naming the extra."""
    with pytest.raises(ImportError, match=r"pip install 'globalstep\[torch\]'") as info:
        require("no_such_module_globalstep", "torch", "the torch adapter")
    assert isinstance(info.value, MissingDependencyError)


def test_heavy_parts_load_on_first_use():
    """`import globalstep` loads no NumPy; naming CheckpointManager loads its module."""
    code = (
        "import sys, globalstep\n"
        "print('numpy' in sys.modules, 'globalstep.checkpoint' in sys.modules)\n"
        "globalstep.CheckpointManager\n"
        "print('globalstep.checkpoint' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False", "True"]


def test_unknown_attribute_is_an_attribute_error():
    """A name the package does not have raises AttributeError naming it."""
    with pytest.raises(AttributeError, match="'NoSuchThing'"):
        _ = globalstep.NoSuchThing


def test_dir_lists_lazy_names():
    """dir(globalstep) lists the names loaded on first use."""
    assert {"CheckpointManager", "SummaryWriter", "ExponentialDecay"} <= set(dir(globalstep))


@pytest.mark.parametrize(
    ("path", "loaded"),
    [
        ("compat.tf", "globalstep.compat.tf"),
        ("compat.keras", "globalstep.compat.keras"),
        ("compat.optax", "globalstep.compat.optax"),
        ("compat.torch", "globalstep.compat.torch"),
        ("schedules", "globalstep.schedules"),
    ],
)
def test_subpackages_resolve_lazily_without_a_framework(path, loaded):
    """After a bare `import globalstep`, `globalstep.<path>` resolves and imports no framework."""
    code = (
        "import sys, globalstep\n"
        f"print({loaded!r} in sys.modules)\n"
        f"module = globalstep.{path}\n"
        "print(module.__name__)\n"
        "heavy = {'torch', 'tensorflow', 'jax', 'keras', 'optax', 'tensorboard', 'matplotlib'}\n"
        "print(sorted(heavy & {m.split('.')[0] for m in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:3] == ["False", loaded, "[]"]


def test_compat_unknown_module_is_an_attribute_error():
    """A compat module that does not exist raises AttributeError naming it."""
    with pytest.raises(AttributeError, match="'jaxx'"):
        _ = globalstep.compat.jaxx


def test_dir_lists_public_names_only():
    """dir(globalstep) is __all__ plus the lazily imported sub-packages, nothing private."""
    names = dir(globalstep)
    assert set(names) == set(globalstep.__all__) | {"checkpoint", "compat", "schedules", "summary"}
    assert not {"Any", "TYPE_CHECKING", "importlib"} & set(names)
    assert names == sorted(names)
