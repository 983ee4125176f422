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
)
from globalstep.triggers import Trigger, all_of, any_of, at, every, once
from globalstep.units import Duration, Unit

__all__ = [
    "CheckpointError",
    "CheckpointExistsError",
    "CheckpointManager",
    "CheckpointNotFoundError",
    "Clock",
    "ConfigError",
    "ConversionError",
    "CorruptCheckpointError",
    "Duration",
    "DurationError",
    "GlobalStepError",
    "KeepBest",
    "LockError",
    "MissingDependencyError",
    "NonFiniteError",
    "Progress",
    "RestoreMismatchError",
    "StepError",
    "Trigger",
    "Unit",
    "__version__",
    "all_of",
    "any_of",
    "at",
    "every",
    "once",
]
