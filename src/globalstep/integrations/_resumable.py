"""The batch arithmetic that the resumable data sets of Keras and TensorFlow share.

Rows in batches of ``batch_size``, in an order that is a function of (seed, epoch), at a
position: the checks of the settings, the batches of one epoch, and the check that a
checkpoint was saved with the same settings. Used by
:class:`~globalstep.integrations.keras.ResumableDataset` and
:class:`~globalstep.integrations.tensorflow.ResumableTFDataset`; it imports no framework.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from globalstep._errors import ConfigError

__all__ = ["batches_per_epoch", "check_same_settings", "count"]


def count(name: str, value: Any, minimum: int) -> int:
    """Returns ``value``, a Python int >= ``minimum``.

    Raises:
        ConfigError: ``value`` is not an int (a bool is not), or is below ``minimum``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(name, f"must be an int >= {minimum}", value)
    return value


def batches_per_epoch(rows: int, batch_size: int, drop_remainder: bool) -> int:
    """The batches of one epoch of ``rows`` rows (the last one smaller unless dropped).

    Raises:
        ConfigError: no batch at all (``batch_size`` above ``rows`` with
            ``drop_remainder``, or no rows).
    """
    full, rest = divmod(rows, batch_size)
    steps = full if drop_remainder or not rest else full + 1
    if steps < 1:
        raise ConfigError("batch_size", f"must be <= the {rows} rows", batch_size)
    return steps


def check_same_settings(data: Any, state: Mapping[str, Any], names: Iterable[str]) -> None:
    """Raises unless each setting ``names`` of ``data`` equals the checkpoint's ``state``.

    Raises:
        ConfigError: a setting differs from the saved one (the order would differ).
    """
    for name in names:
        if state[name] != getattr(data, name):
            raise ConfigError(
                name,
                f"must equal the checkpoint's ({state[name]!r}) to resume the same order",
                getattr(data, name),
            )
