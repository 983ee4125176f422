"""globalstep: the training run's global step, and everything keyed by it.

The step is the number of optimizer updates already applied (see :mod:`globalstep._clock`).

Example:
    >>> import globalstep
    >>> clock = globalstep.Clock()
    >>> log = globalstep.every(100)
    >>> clock.tick(100)
    >>> log.should_fire(clock)
    True
"""

import importlib
from typing import TYPE_CHECKING, Any

from globalstep import _aliases
from globalstep._clock import MAX_STEP, Clock, Progress, check_step
from globalstep._errors import (
    CheckpointError,
    CheckpointExistsError,
    CheckpointNotFoundError,
    ConfigError,
    ConversionError,
    CorruptCheckpointError,
    DivergenceError,
    DurationError,
    GlobalStepError,
    LockError,
    MissingDependencyError,
    NonFiniteError,
    PeerLostError,
    RestoreMismatchError,
    ResumeDivergenceWarning,
    StepError,
    StepMismatchError,
    SummaryWriteError,
    TracingError,
    TrackerRefusedError,
    WorldSizeError,
    WorldSizeWarning,
)
from globalstep._guards import DEFAULT_STALE_THRESHOLD, FrozenStepWarning, StaleStepDetector
from globalstep._triggers import Trigger, UncountedEpochWarning, all_of, any_of, at, every, once
from globalstep._units import Duration, DurationLike, Unit
from globalstep._version import __version__

if TYPE_CHECKING:
    from globalstep.checkpoint import CheckpointManager, FastTier, KeepBest, PerRank
    from globalstep.run import Rollback, Run
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

_aliases.install()  # the old import paths, for one release

# Names whose modules need NumPy (and more) are imported on first use, so that
# `import globalstep` stays as light as the clock, the units and the triggers it needs.
_LAZY = {
    "CheckpointManager": "globalstep.checkpoint",
    "FastTier": "globalstep.checkpoint",
    "KeepBest": "globalstep.checkpoint",
    "PerRank": "globalstep.checkpoint",
    "SummaryWriter": "globalstep.summary",
    "Rollback": "globalstep.run",
    "Run": "globalstep.run",
    "Clip": "globalstep.schedules",
    "Constant": "globalstep.schedules",
    "CosineDecay": "globalstep.schedules",
    "CosineDecayRestarts": "globalstep.schedules",
    "ExponentialDecay": "globalstep.schedules",
    "InverseSqrt": "globalstep.schedules",
    "InverseTimeDecay": "globalstep.schedules",
    "Join": "globalstep.schedules",
    "Linear": "globalstep.schedules",
    "LinearCosineDecay": "globalstep.schedules",
    "NaturalExpDecay": "globalstep.schedules",
    "NoisyLinearCosineDecay": "globalstep.schedules",
    "OneCycle": "globalstep.schedules",
    "PiecewiseConstant": "globalstep.schedules",
    "PolynomialDecay": "globalstep.schedules",
    "ReduceOnPlateau": "globalstep.schedules",
    "Scale": "globalstep.schedules",
    "Schedule": "globalstep.schedules",
    "Warmup": "globalstep.schedules",
    "WarmupStableDecay": "globalstep.schedules",
    "clip": "globalstep.schedules",
    "join": "globalstep.schedules",
    "scale": "globalstep.schedules",
    "warmup": "globalstep.schedules",
}


# Sub-packages reachable as attributes (``globalstep.compat.tf.exponential_decay(...)``)
# after a bare ``import globalstep``, imported on first use; none imports a framework.
_SUBMODULES = ("checkpoint", "compat", "schedules", "summary")


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"globalstep.{name}")  # also binds globalstep.<name>
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'globalstep' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names only: ``__all__`` and the sub-packages reachable as attributes."""
    return sorted({*__all__, *_SUBMODULES})


__all__ = [  # noqa: RUF022 (sorted as plain strings: tests/test_package.py)
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
    "DEFAULT_STALE_THRESHOLD",
    "DivergenceError",
    "Duration",
    "DurationError",
    "DurationLike",
    "ExponentialDecay",
    "FastTier",
    "FrozenStepWarning",
    "GlobalStepError",
    "InverseSqrt",
    "InverseTimeDecay",
    "Join",
    "KeepBest",
    "Linear",
    "LinearCosineDecay",
    "LockError",
    "MAX_STEP",
    "MissingDependencyError",
    "NaturalExpDecay",
    "NoisyLinearCosineDecay",
    "NonFiniteError",
    "OneCycle",
    "PeerLostError",
    "PerRank",
    "PiecewiseConstant",
    "PolynomialDecay",
    "Progress",
    "ReduceOnPlateau",
    "RestoreMismatchError",
    "ResumeDivergenceWarning",
    "Rollback",
    "Run",
    "Scale",
    "Schedule",
    "StaleStepDetector",
    "StepError",
    "StepMismatchError",
    "SummaryWriteError",
    "SummaryWriter",
    "TracingError",
    "TrackerRefusedError",
    "Trigger",
    "UncountedEpochWarning",
    "Unit",
    "Warmup",
    "WarmupStableDecay",
    "WorldSizeError",
    "WorldSizeWarning",
    "__version__",
    "all_of",
    "any_of",
    "at",
    "check_step",
    "clip",
    "every",
    "join",
    "once",
    "scale",
    "warmup",
]
