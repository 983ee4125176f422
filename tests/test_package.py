"""Tests for the package as a whole: public names, light import, optional extras."""

import subprocess
import sys

import pytest

import globalstep
from globalstep._optional import require
from globalstep.errors import MissingDependencyError


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
        "import sys, globalstep, globalstep.cli\n"
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
