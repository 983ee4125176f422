"""globalstep: the training run's global step, and everything keyed by it.

The step is the number of optimizer updates already applied (see :mod:`globalstep.clock`).

Example:
    >>> import globalstep
    >>> clock = globalstep.Clock()
    >>> log = globalstep.every(100)
    >>> clock.tick(100)
    >>> log.should_fire(clock)
    True
"""

from globalstep._version import __version__
from globalstep.checkpoint import CheckpointManager, KeepBest
from globalstep.clock import Clock, Progress
from globalstep.errors import (
    CheckpointError,
    CheckpointExistsError,
    CheckpointNotFoundError,
    ConfigError,
    ConversionError,
    CorruptCheckpointError,
    DurationError,
    GlobalStepError,
    LockError,
    MissingDependencyError,
    NonFiniteError,
    RestoreMismatchError,
    StepError,
    SummaryWriteError,
)
from globalstep.schedules import (
    Clip,
    Constant,
    CosineDecay,
    CosineDecayRestarts,
    ExponentialDecay,
    InverseSqrt,
    InverseTimeDecay,
    Join,
    Linear,
    LinearCosineDecay,
    NaturalExpDecay,
    NoisyLinearCosineDecay,
    OneCycle,
    PiecewiseConstant,
    PolynomialDecay,
    ReduceOnPlateau,
    Scale,
    Schedule,
    Warmup,
    WarmupStableDecay,
    clip,
    join,
    scale,
    warmup,
)
from globalstep.summary import SummaryWriter
from globalstep.triggers import Trigger, all_of, any_of, at, every, once
from globalstep.units import Duration, Unit

__all__ = [
    "CheckpointError",
    "CheckpointExistsError",
    "CheckpointManager",
    "CheckpointNotFoundError",
    "Clip",
    "Clock",
    "ConfigError",
    "Constant",
    "ConversionError",
    "CorruptCheckpointError",
    "CosineDecay",
    "CosineDecayRestarts",
    "Duration",
    "DurationError",
    "ExponentialDecay",
    "GlobalStepError",
    "InverseSqrt",
    "InverseTimeDecay",
    "Join",
    "KeepBest",
    "Linear",
    "LinearCosineDecay",
    "LockError",
    "MissingDependencyError",
    "NaturalExpDecay",
    "NoisyLinearCosineDecay",
    "NonFiniteError",
    "OneCycle",
    "PiecewiseConstant",
    "PolynomialDecay",
    "Progress",
    "ReduceOnPlateau",
    "RestoreMismatchError",
    "Scale",
    "Schedule",
    "StepError",
    "SummaryWriteError",
    "SummaryWriter",
    "Trigger",
    "Unit",
    "Warmup",
    "WarmupStableDecay",
    "__version__",
    "all_of",
    "any_of",
    "at",
    "clip",
    "every",
    "join",
    "once",
    "scale",
    "warmup",
]
