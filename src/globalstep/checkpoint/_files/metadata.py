"""What a checkpoint's state.json says besides its tree: metrics, creation time, sizes.

The converters between the metrics a caller passes and the JSON a checkpoint stores, and
the readers of a stored document that retention and ``globalstep ckpt ls`` share.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

import numpy as np

from globalstep._errors import ConfigError
from globalstep.checkpoint._directory.policy import CheckpointInfo
from globalstep.checkpoint._files.document import Document

__all__ = ["info_of", "metrics_from_json", "metrics_to_json", "number", "sharded_bytes"]


def metrics_to_json(metrics: Any) -> dict[str, Any]:
    """Returns ``metrics`` as stored: ints and floats, non-finite ones as ``repr``.

    Raises:
        ConfigError: ``metrics`` does not map names to numbers.
    """
    if metrics is None:
        return {}
    if not isinstance(metrics, Mapping):
        raise ConfigError("metrics", "must map names to numbers", metrics)
    out: dict[str, Any] = {}
    for name, value in metrics.items():
        # NumPy scalars count (np.float32 from a mean is common); bools do not.
        if (
            not isinstance(name, str)
            or isinstance(value, bool | np.bool_)
            or not isinstance(value, numbers.Real)
        ):
            raise ConfigError("metrics", "must map names to numbers", metrics)
        number = int(value) if isinstance(value, numbers.Integral) else float(value)
        out[name] = number if math.isfinite(number) else repr(number)
    return out


def metrics_from_json(metrics: Any) -> dict[str, float]:
    """Returns the stored metrics that are numbers (another version's others are left out)."""
    if not isinstance(metrics, dict):
        return {}
    out = {}
    for name, value in metrics.items():
        if (isinstance(value, int | float) and not isinstance(value, bool)) or value in (
            "nan",
            "inf",
            "-inf",
        ):
            out[str(name)] = float(value)
    return out


def number(value: Any, default: float = 0.0) -> float:
    """Returns a stored number as a float, or ``default`` where it is not one."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return default


def info_of(step: int, state: Document) -> CheckpointInfo:
    """Returns what retention knows of ``step`` from its state.json (or its summary)."""
    return CheckpointInfo(step, number(state.created_unix), metrics_from_json(state.metrics))


def sharded_bytes(state: Document) -> int:
    """The bytes of a checkpoint's sharded chunks, as its state.json lists them (0 if none)."""
    section = state.sharded
    tensors = section.get("tensors") if isinstance(section, dict) else None
    if not isinstance(tensors, dict):
        return 0
    return sum(
        int(number(chunk.get("length")))
        for tensor in tensors.values()
        if isinstance(tensor, dict) and isinstance(tensor.get("chunks"), list)
        for chunk in tensor["chunks"]
        if isinstance(chunk, dict)
    )
