"""Guards on logged values: a NaN or an infinity in a guarded scalar stops the run.

A guarded value that is not finite raises :class:`~globalstep._errors.NonFiniteError`
carrying the step, the tag and the value, or, where the caller gives a handler, calls it
with that error instead (to skip a batch, lower the rate, or save a checkpoint first).
The frozen-step warning (a writer or a schedule used many times at one step) lives in
:mod:`globalstep._guards`.

Example:
    >>> check_finite("loss", 0.25, step=3)
    True
    >>> check_finite("loss", float("nan"), step=3)
    Traceback (most recent call last):
    ...
    globalstep._errors.NonFiniteError: `loss` is nan at step 3: a guarded value must be finite.
    >>> seen = []
    >>> check_finite("loss", float("inf"), step=4, on_nonfinite=seen.append)
    False
    >>> seen[0].step, seen[0].tag
    (4, 'loss')
"""

from __future__ import annotations

import math
from collections.abc import Callable

from globalstep._errors import NonFiniteError

__all__ = ["NonFiniteHandler", "check_finite"]

NonFiniteHandler = Callable[[NonFiniteError], object]
"""Called with the error in place of raising it."""


def check_finite(
    tag: str,
    value: float,
    step: int | None,
    on_nonfinite: NonFiniteHandler | None = None,
) -> bool:
    """Returns True when ``value`` is finite; otherwise raises, or calls the handler.

    Args:
        tag: the value's name, for the error.
        value: the number to check.
        step: the step it belongs to, for the error.
        on_nonfinite: called with the :class:`NonFiniteError` instead of raising it.

    Returns:
        True for a finite value, False when the handler was called.

    Raises:
        NonFiniteError: the value is NaN or infinite and no handler was given.
    """
    if math.isfinite(value):
        return True
    error = NonFiniteError(tag, value, step)
    if on_nonfinite is None:
        raise error
    on_nonfinite(error)
    return False
