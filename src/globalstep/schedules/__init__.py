"""Schedules: pure, frozen, serialisable functions of the step, and their composition.

A step is the number of optimizer updates applied (see :mod:`globalstep.clock`); a
schedule's value at step ``s`` is the one update number ``s`` uses.

Example:
    >>> from globalstep.schedules import CosineDecay, warmup
    >>> lr = warmup(CosineDecay(3e-4, decay_steps=1000), steps=100)
    >>> lr(0), lr(100)
    (0.0, 0.0003)
    >>> lr.values([0, 50, 100]).tolist()
    [0.0, 0.00015, 0.0003]
"""

from globalstep.schedules._base import Schedule, from_config, registered
from globalstep.schedules.compose import Clip, Join, Scale, Warmup, clip, join, scale, warmup
from globalstep.schedules.core import (
    Constant,
    CosineDecay,
    CosineDecayRestarts,
    ExponentialDecay,
    InverseSqrt,
    InverseTimeDecay,
    Linear,
    LinearCosineDecay,
    NaturalExpDecay,
    NoisyLinearCosineDecay,
    OneCycle,
    PiecewiseConstant,
    PolynomialDecay,
    WarmupStableDecay,
)
from globalstep.schedules.plateau import ReduceOnPlateau

__all__ = [
    "Clip",
    "Constant",
    "CosineDecay",
    "CosineDecayRestarts",
    "ExponentialDecay",
    "InverseSqrt",
    "InverseTimeDecay",
    "Join",
    "Linear",
    "LinearCosineDecay",
    "NaturalExpDecay",
    "NoisyLinearCosineDecay",
    "OneCycle",
    "PiecewiseConstant",
    "PolynomialDecay",
    "ReduceOnPlateau",
    "Scale",
    "Schedule",
    "Warmup",
    "WarmupStableDecay",
    "clip",
    "from_config",
    "join",
    "registered",
    "scale",
    "warmup",
]
