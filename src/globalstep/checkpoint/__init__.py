"""Crash-safe checkpoints keyed by the step: policy, storage and the manager that wires them.

Example:
    >>> import numpy as np, tempfile
    >>> with CheckpointManager(tempfile.mkdtemp(), max_to_keep=1) as manager:
    ...     manager.save(10, {"w": np.ones(2)})
    ...     manager.save(20, {"w": np.zeros(2)})
    ...     manager.steps(), manager.restore()["w"]
    ([20], array([0., 0.]))
"""

from globalstep.checkpoint.distributed import DistributedCheckpointError, DistributedOptions
from globalstep.checkpoint.lazy import CheckpointReader
from globalstep.checkpoint.manager import (
    CheckpointFollower,
    CheckpointManager,
    CheckpointSummary,
    CheckpointWarning,
)
from globalstep.checkpoint.perrank import PerRank
from globalstep.checkpoint.policy import (
    CheckpointInfo,
    KeepAny,
    KeepBest,
    KeepEveryNHours,
    KeepEveryNSteps,
    KeepLatest,
    KeepPolicy,
)
from globalstep.checkpoint.tree import RestoreReport
from globalstep.errors import WorldSizeError, WorldSizeWarning

__all__ = [
    "CheckpointFollower",
    "CheckpointInfo",
    "CheckpointManager",
    "CheckpointReader",
    "CheckpointSummary",
    "CheckpointWarning",
    "DistributedCheckpointError",
    "DistributedOptions",
    "KeepAny",
    "KeepBest",
    "KeepEveryNHours",
    "KeepEveryNSteps",
    "KeepLatest",
    "KeepPolicy",
    "PerRank",
    "RestoreReport",
    "WorldSizeError",
    "WorldSizeWarning",
]
