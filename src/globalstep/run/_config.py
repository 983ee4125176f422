"""Config drift: the run's configuration stored with each checkpoint, compared on resuming.

The configuration is the ``config`` given to :class:`~globalstep.run.Run`, each schedule's
``to_config()`` and the clocks' batch size, steps per epoch and tokens per step, as JSON.
It is stored in the checkpoint's tree (``run/config``, one JSON string); resuming with
another one warns with the differences (:class:`~globalstep._errors.ConfigDriftWarning`)
or, with ``strict=True``, raises.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from globalstep._clock import Clock
from globalstep._errors import ConfigDriftWarning, ConfigError
from globalstep.checkpoint import Document

__all__ = ["check_drift", "config_differences", "run_config", "stored_config"]


def _jsonable(value: Any, path: str) -> Any:
    """Returns ``value`` with NumPy scalars as Python numbers; refuses what JSON cannot hold."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.generic) and value.shape == ():
        return value.item()
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise ConfigError(f"{path} key", "must be a str", key)
            out[key] = _jsonable(item, f"{path}[{key!r}]")
        return out
    if isinstance(value, list | tuple):
        return [_jsonable(item, f"{path}[{i}]") for i, item in enumerate(value)]
    raise ConfigError(
        path, "must be JSON-ready: None, bool, int, float, str, or lists and dicts of them", value
    )


def _flat_items(value: Any, prefix: str) -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key in sorted(value):
            out.update(_flat_items(value[key], f"{prefix}.{key}" if prefix else key))
        return out
    return {prefix: value}


def config_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Returns one line per setting that differs, as ``key: saved -> current``.

    Example:
        >>> config_differences({"lr": 0.01, "batch": 20}, {"lr": 0.5, "batch": 20})
        ['lr: 0.01 (checkpoint) -> 0.5 (now)']
    """
    before, after = _flat_items(dict(saved), ""), _flat_items(dict(current), "")
    lines = []
    for key in sorted(set(before) | set(after)):
        old = before.get(key, "<absent>")
        new = after.get(key, "<absent>")
        if old != new or type(old) is not type(new):
            lines.append(f"{key}: {old!r} (checkpoint) -> {new!r} (now)")
    return lines


def run_config(
    config: Mapping[str, Any] | None, schedules: Mapping[str, Any], clocks: Mapping[str, Clock]
) -> dict[str, Any]:
    """Returns the configuration a Run stores: ``config``, the schedules', the clocks'.

    Raises:
        ConfigError: ``config`` is not a mapping, or holds what JSON cannot.
    """
    if config is not None and not isinstance(config, Mapping):
        raise ConfigError("config", "must be a mapping of JSON-ready values", config)
    stored = {}
    for name, schedule in schedules.items():
        to_config = getattr(schedule, "to_config", None)
        stored[name] = (
            _jsonable(to_config(), f"schedules[{name!r}]") if callable(to_config) else None
        )
    counts = {
        name: {
            "steps_per_epoch": c.steps_per_epoch,
            "batch_size": c.batch_size,
            "tokens_per_step": c.tokens_per_step,
        }
        for name, c in clocks.items()
    }
    return {
        "config": _jsonable(dict(config or {}), "config"),
        "schedules": stored,
        "clocks": counts,
    }


def _child(node: Any, key: str) -> Any:
    """A dict node's child in a checkpoint's encoded tree (see
    :func:`globalstep.checkpoint._tree.flatten.flatten`: a dict is ``{"dict": {key: node}}``)."""
    return node["dict"][key]


def stored_config(document: Document) -> dict[str, Any] | None:
    """Returns the run configuration stored in a checkpoint, read from its ``state.json``
    (:meth:`CheckpointManager.document <globalstep.checkpoint.CheckpointManager.document>`);
    None where it holds none (a checkpoint not written by a Run) or one unreadable.
    """
    try:
        node = _child(_child(document.tree, "run"), "config")
        saved = json.loads(node["value"])
    except (KeyError, TypeError, ValueError):
        return None
    return saved if isinstance(saved, dict) else None


def check_drift(
    saved: Mapping[str, Any] | None,
    current: Mapping[str, Any],
    *,
    strict: bool,
    directory: Path,
    step: int,
    stacklevel: int = 3,
) -> None:
    """Warns (or, with ``strict``, raises) where ``current`` differs from ``saved``, the
    configuration stored with the checkpoint of ``step``; nothing to compare with None.

    The warning points ``stacklevel`` frames up (as :func:`warnings.warn` counts from
    here): at the caller of ``Run.restore``.

    Raises:
        ConfigError: they differ and ``strict`` is True.
    """
    if saved is None:
        return
    lines = config_differences(saved, current)
    if not lines:
        return
    if strict:
        raise ConfigError(
            "config",
            f"must match the configuration stored with the checkpoint of step {step} (strict=True)",
            lines,
            hint="Restore the old values, or start the run in a new directory.",
        )
    warnings.warn(
        f"resuming {directory} at step {step} with a configuration that differs "
        "from the checkpoint's:\n  "
        + "\n  ".join(lines)
        + "\nThe run goes on with the new values; pass strict=True to refuse.",
        ConfigDriftWarning,
        stacklevel=stacklevel,
    )
