"""Detection of the classic frozen-step bug: the step is read again and again, unchanged.

A schedule or a summary writer is called once per optimizer update. When such a caller sees
the same step many times in a row, updates are happening but nothing advances the step
(``minimize()`` without ``global_step=``, a ``clock.tick()`` forgotten), so the learning rate
is frozen at its step-0 value and every metric lands on one step. :class:`StaleStepDetector`
notices this and warns once, naming the clock.

Example:
    >>> import warnings
    >>> detector = StaleStepDetector("exponential_decay", threshold=3)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     for _ in range(5):
    ...         detector.observe(0, "global_step")
    >>> len(caught), caught[0].category.__name__
    (1, 'FrozenStepWarning')
"""

from __future__ import annotations

import warnings

from globalstep._errors import ConfigError, FrozenStepWarning

__all__ = ["DEFAULT_STALE_THRESHOLD", "FrozenStepWarning", "StaleStepDetector"]

DEFAULT_STALE_THRESHOLD = 1000
"""Reads at one unchanged step after which a caller warns."""

_TICK_FIX = "Call clock.tick() once per optimizer update (or pass global_step= to minimize())."


class StaleStepDetector:
    """Counts reads at an unchanged step and warns once when they pass a threshold.

    Args:
        what: names the reader in the warning, e.g. ``"exponential_decay"``.
        threshold: consecutive reads at one step after which to warn, >= 2.
        used: how ``what`` is used, for the warning: ``"read"``, ``"written to"``.
        effect: what a frozen step does to it, for the warning.
        fix: what to do, for the warning (by default: tick the clock once per update).

    Raises:
        ConfigError: ``threshold`` is not an int >= 2.
    """

    __slots__ = (
        "_count",
        "_effect",
        "_fix",
        "_last",
        "_threshold",
        "_used",
        "_warned",
        "_what",
    )

    def __init__(
        self,
        what: str,
        threshold: int = DEFAULT_STALE_THRESHOLD,
        *,
        used: str = "read",
        effect: str = "the value stays frozen",
        fix: str = _TICK_FIX,
    ) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 2:
            raise ConfigError("threshold", "must be an int >= 2", threshold)
        self._what = what
        self._used = used
        self._effect = effect
        self._fix = fix
        self._threshold = threshold
        self._last: int | None = None
        self._count = 0
        self._warned = False

    @property
    def last_step(self) -> int | None:
        """The step of the latest read observed, or None."""
        return self._last

    def observe(self, step: int, clock_name: str | None = None, *, stacklevel: int = 3) -> None:
        """Records one read of ``step``; warns once if the step has stopped advancing.

        ``stacklevel`` is the warning's, counted from this method: the default names the
        line that called the caller.
        """
        if step != self._last:
            self._last = step
            self._count = 1
            return
        self._count += 1
        if self._count == self._threshold and not self._warned:
            self._warned = True
            clock = f"clock {clock_name!r}" if clock_name else "the step"
            warnings.warn(
                f"{self._what} was {self._used} {self._count} times at step {step} of {clock}: "
                f"the step is not advancing, so {self._effect}. {self._fix}",
                FrozenStepWarning,
                stacklevel=stacklevel,
            )
