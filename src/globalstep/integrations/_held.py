"""The one rule of ``integrations.torch.attach`` and ``integrations.keras.follow``: an
optimizer, or a clock, has one live holder at a time (one attachment, one follower)."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

from globalstep._errors import ConfigError

__all__ = ["refuse_held"]


def refuse_held(
    holder_of: Callable[[Any], Any], key: Any, parameter: str, shown: Any, held: str, hint: str
) -> None:
    """Raises ConfigError where ``holder_of(key)`` is a live holder of ``key``.

    A holder nothing reaches any more may still wait for the cycle collector (an optimizer
    holds its hooks, which hold its attachment): a collection runs before it is refused,
    so it does not block a new one.

    Args:
        holder_of: ``key``'s holder, or None (``Attachment.of``, ``Follower.of``).
        key: the optimizer or the clock.
        parameter: the argument ``key`` was passed as, which the error names.
        shown: ``key`` as the error shows it.
        held: what the error says of ``key`` (``"is followed already"``), before the holder.
        hint: what to do instead.
    """
    if holder_of(key) is None:
        return
    gc.collect()
    holder = holder_of(key)
    if holder is not None:
        raise ConfigError(parameter, f"{held}, by {holder!r}", shown, hint=hint)
