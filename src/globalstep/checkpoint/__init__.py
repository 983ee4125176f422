"""Crash-safe checkpoints keyed by the step: policy, storage and the manager that wires them.

Example:
    >>> import numpy as np, tempfile
    >>> with CheckpointManager(tempfile.mkdtemp(), max_to_keep=1) as manager:
    ...     manager.save(10, {"w": np.ones(2)})
    ...     manager.save(20, {"w": np.zeros(2)})
    ...     manager.steps(), manager.restore()["w"]
    ([20], array([0., 0.]))
"""

from globalstep._errors import WorldSizeError, WorldSizeWarning
from globalstep.checkpoint._directory.policy import (
    CheckpointInfo,
    KeepAny,
    KeepBest,
    KeepEveryNHours,
    KeepEveryNSteps,
    KeepLatest,
    KeepPolicy,
    policy_from_config,
)
from globalstep.checkpoint._fast_tier import FastTier, Restored
from globalstep.checkpoint._files.arrays import read_arrays
from globalstep.checkpoint._files.commit import commit as commit_checkpoint
from globalstep.checkpoint._files.commit import remove_checkpoint
from globalstep.checkpoint._files.document import COMMIT_FILE, Document, checksum_of, load_state
from globalstep.checkpoint._files.lazy import CheckpointReader
from globalstep.checkpoint._ledger import LEDGER_FILE, Ledger, LedgerSummary, read_ledger
from globalstep.checkpoint._manager import (
    CheckpointFollower,
    CheckpointManager,
    CheckpointSummary,
    CheckpointWarning,
)
from globalstep.checkpoint._ranks.coordinated import DistributedCheckpointError, DistributedOptions
from globalstep.checkpoint._ranks.perrank import PerRank
from globalstep.checkpoint._save_trigger import SaveTrigger
from globalstep.checkpoint._tree.adapters import Adapter, OpenTemplate
from globalstep.checkpoint._tree.adapters import add as add_adapter
from globalstep.checkpoint._tree.adapters import register as register_adapter
from globalstep.checkpoint._tree.build import RestoreReport, unflatten
from globalstep.checkpoint._tree.flatten import Sharded, array_nodes
from globalstep.checkpoint._tree.flatten import flatten as flatten_tree
from globalstep.checkpoint._tree.leaves import check_key, dataclass_fields, decode_dtype, is_frozen
from globalstep.checkpoint._tree.templates import template_arrays

__all__ = [
    "COMMIT_FILE",
    "LEDGER_FILE",
    "Adapter",
    "CheckpointFollower",
    "CheckpointInfo",
    "CheckpointManager",
    "CheckpointReader",
    "CheckpointSummary",
    "CheckpointWarning",
    "DistributedCheckpointError",
    "DistributedOptions",
    "Document",
    "FastTier",
    "KeepAny",
    "KeepBest",
    "KeepEveryNHours",
    "KeepEveryNSteps",
    "KeepLatest",
    "KeepPolicy",
    "Ledger",
    "LedgerSummary",
    "OpenTemplate",
    "PerRank",
    "RestoreReport",
    "Restored",
    "SaveTrigger",
    "Sharded",
    "WorldSizeError",
    "WorldSizeWarning",
    "add_adapter",
    "array_nodes",
    "check_key",
    "checksum_of",
    "commit_checkpoint",
    "dataclass_fields",
    "decode_dtype",
    "flatten_tree",
    "is_frozen",
    "load_state",
    "policy_from_config",
    "read_arrays",
    "read_ledger",
    "register_adapter",
    "remove_checkpoint",
    "template_arrays",
    "unflatten",
]
