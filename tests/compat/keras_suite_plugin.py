"""A pytest plugin: Keras' own schedule tests, run against globalstep.compat.keras.

Loaded with ``-p keras_suite_plugin`` (tests/compat on the path). Before collection it
puts a copy of ``keras.src.optimizers.schedules`` in its place whose six schedule classes
are globalstep.compat.keras's (their Keras faces), so the installed test file's
``from keras.src.optimizers import schedules`` gets ours; nothing of Keras is copied. At
the end it prints how many compat schedules the tests built, so a redirect that did not
take shows as 0.
"""

from __future__ import annotations

import sys
import types

import keras  # noqa: F401  (imports the real package first)
import keras.src.optimizers as optimizers_package
from keras.src.optimizers import schedules as real

from globalstep.compat import keras as ck

SCHEDULES = [
    "CosineDecay",
    "CosineDecayRestarts",
    "ExponentialDecay",
    "InverseTimeDecay",
    "PiecewiseConstantDecay",
    "PolynomialDecay",
]
built = {"count": 0}


def _counting(face: type) -> type:
    init = face.__init__

    def counted_init(self, *args, **kwargs):
        built["count"] += 1
        init(self, *args, **kwargs)

    face.__init__ = counted_init
    return face


def pytest_configure(config):
    """Swaps the schedules module before the test file is imported."""
    shim = types.ModuleType(real.__name__, real.__doc__)
    shim.__dict__.update(vars(real))
    for name in SCHEDULES:
        setattr(shim, name, _counting(ck._keras_face(getattr(ck, name))))
    sys.modules[real.__name__] = shim
    optimizers_package.schedules = shim


def pytest_terminal_summary(terminalreporter):
    """Reports how many compat schedules the tests built."""
    terminalreporter.write_line(f"globalstep.compat.keras schedules built: {built['count']}")
