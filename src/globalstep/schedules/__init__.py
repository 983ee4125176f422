"""Schedules: pure, frozen, serialisable functions of the step, and their composition.

A step is the number of optimizer updates applied (see :mod:`globalstep._clock`); a
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
from globalstep.schedules._compose import Clip, Join, Scale, Warmup, clip, join, scale, warmup
from globalstep.schedules._cosine import (
    CosineDecay,
    CosineDecayRestarts,
    LinearCosineDecay,
    NoisyLinearCosineDecay,
    standard_normal,
)
from globalstep.schedules._decay import ExponentialDecay, InverseTimeDecay, NaturalExpDecay
from globalstep.schedules._plan import Finding, Plan
from globalstep.schedules._plateau import PlateauRule, ReduceOnPlateau
from globalstep.schedules._polynomial import Constant, Linear, PiecewiseConstant, PolynomialDecay
from globalstep.schedules._warmup_decay import InverseSqrt, OneCycle, WarmupStableDecay

__all__ = [
    "Clip",
    "Constant",
    "CosineDecay",
    "CosineDecayRestarts",
    "ExponentialDecay",
    "Finding",
    "InverseSqrt",
    "InverseTimeDecay",
    "Join",
    "Linear",
    "LinearCosineDecay",
    "NaturalExpDecay",
    "NoisyLinearCosineDecay",
    "OneCycle",
    "PiecewiseConstant",
    "Plan",
    "PlateauRule",
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
    "standard_normal",
    "warmup",
]

# TEMPORARY (until the registry names them): the type name checkpoints record for a core
# schedule stays ``globalstep.schedules.core.<class>``.
for _name in [
    "Constant",
    "CosineDecay",
    "CosineDecayRestarts",
    "ExponentialDecay",
    "InverseSqrt",
    "InverseTimeDecay",
    "Linear",
    "LinearCosineDecay",
    "NaturalExpDecay",
    "NoisyLinearCosineDecay",
    "OneCycle",
    "PiecewiseConstant",
    "PolynomialDecay",
    "WarmupStableDecay",
]:
    globals()[_name].__module__ = "globalstep.schedules.core"
del _name
