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

A schedule of your own is a frozen dataclass on :class:`Schedule` with a ``name``, and
:meth:`Schedule.compute`: see :class:`Schedule` and ``docs/write-your-own-schedule.md``.
"""

from globalstep.schedules._base import (
    Length,
    Schedule,
    Steps,
    Values,
    check_flag,
    check_number,
    check_step,
    check_steps,
    from_config,
    parse_length,
    registered,
)
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
    "Length",
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
    "Steps",
    "Values",
    "Warmup",
    "WarmupStableDecay",
    "check_flag",
    "check_number",
    "check_step",
    "check_steps",
    "clip",
    "from_config",
    "join",
    "parse_length",
    "registered",
    "scale",
    "warmup",
]
