"""The core schedules: each a frozen dataclass, a pure function of the step.

In every formula :math:`s` is the step (optimizer updates applied, see
:mod:`globalstep.clock`), lengths are in steps, and values are computed in the schedule's
``dtype`` (float64 unless ``dtype="float32"``). Each schedule's value at step 0 is the one
the very first update uses.

The schedules live in one module a family (this one names them all): a value held or moved
along a power of the step (:mod:`~globalstep.schedules._polynomial`), decays by a rate per
period (:mod:`~globalstep.schedules._decay`), cosines (:mod:`~globalstep.schedules._cosine`),
and warm-up and decay in one (:mod:`~globalstep.schedules._warmup_decay`).

Example:
    >>> lr = ExponentialDecay(initial=0.1, decay_steps=100_000, rate=0.96, staircase=True)
    >>> lr(0), lr(23_999)
    (0.1, 0.1)
"""

from __future__ import annotations

from typing import ClassVar as ClassVar

from globalstep.schedules import _cosine, _decay, _polynomial, _warmup_decay
from globalstep.schedules._base import Length as Length
from globalstep.schedules._cosine import CosineDecay as CosineDecay
from globalstep.schedules._cosine import CosineDecayRestarts as CosineDecayRestarts
from globalstep.schedules._cosine import LinearCosineDecay as LinearCosineDecay
from globalstep.schedules._cosine import NoisyLinearCosineDecay as NoisyLinearCosineDecay
from globalstep.schedules._cosine import standard_normal as standard_normal
from globalstep.schedules._decay import ExponentialDecay as ExponentialDecay
from globalstep.schedules._decay import InverseTimeDecay as InverseTimeDecay
from globalstep.schedules._decay import NaturalExpDecay as NaturalExpDecay
from globalstep.schedules._polynomial import Constant as Constant
from globalstep.schedules._polynomial import Linear as Linear
from globalstep.schedules._polynomial import PiecewiseConstant as PiecewiseConstant
from globalstep.schedules._polynomial import PolynomialDecay as PolynomialDecay
from globalstep.schedules._warmup_decay import InverseSqrt as InverseSqrt
from globalstep.schedules._warmup_decay import OneCycle as OneCycle
from globalstep.schedules._warmup_decay import WarmupStableDecay as WarmupStableDecay

__all__ = sorted(
    name
    for module in (_polynomial, _decay, _cosine, _warmup_decay)
    for name in module.__all__
    if name != "standard_normal"  # a helper of the compat layers, not a schedule
)

# This module is the schedules' public home, as before they were split into families, and
# their __module__ says so: the type names that checkpoints record (``jax.pytree``'s
# dataclasses, the tree's report), pickles, the command line's grouping of core schedules;
# typing.get_type_hints resolves their annotations here, hence ClassVar and Length above.
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
