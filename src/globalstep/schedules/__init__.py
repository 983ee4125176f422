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
    "Length",
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
    "standard_normal",
    "warmup",
]
