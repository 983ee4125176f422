"""The scalar memo of schedules: a call at an int step answered from ``values()`` of its block.

A schedule (core, or a compat schedule) answers ``schedule(step)`` for an int step from the
values of the aligned block of :data:`MEMO_BLOCK` steps around it, computed once by its
vectorised ``values()``; a per-update reader (``Run.value``, ``attach``'s step hook) reads
the hit itself through :func:`memo_of`. Shared by :mod:`globalstep.schedules`,
:mod:`globalstep.compat`, :mod:`globalstep.run` and :mod:`globalstep.integrations.torch`;
a schedule written on :class:`~globalstep.schedules.Schedule` gets it with nothing to do.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "MEMO_BITS",
    "MEMO_BLOCK",
    "MEMO_BLOCKS",
    "MEMO_CALLS",
    "MEMO_MASK",
    "memo_fill",
    "memo_of",
]

MEMO_BITS = 10
MEMO_BLOCK = 1 << MEMO_BITS
"""Steps per memo block: a scalar call computes ``values()`` on the aligned block around it."""
MEMO_MASK = MEMO_BLOCK - 1
MEMO_BLOCKS = 4
"""Blocks a schedule keeps (the oldest filled is dropped first): 4 x 1024 steps."""


def memo_fill(schedule: Any, block: int) -> list[float]:
    """Computes ``schedule.values()`` on steps ``[block * MEMO_BLOCK, (block + 1) * MEMO_BLOCK)``
    and keeps them, as Python floats, in ``schedule.__dict__["_memo"]``; returns them.

    The memo makes a scalar call cost two lookups after the first call in a block, and
    equal to ``values()`` bit for bit by construction. It is safe to read from several
    threads: each step is a pure function of the schedule's fields, a block is stored
    whole with one dict assignment, and a block computed twice by two threads is the same.
    It lives in the instance's ``__dict__`` (not a field), so it takes no part in equality,
    hashing, ``repr`` or configs.

    A class gets the memo by answering ``type(step) is int and 0 <= step <= MAX_STEP`` with::

        try:
            return self.__dict__["_memo"][step >> MEMO_BITS][step & MEMO_MASK]
        except KeyError:
            return memo_fill(self, step >> MEMO_BITS)[step & MEMO_MASK]

    and a ``values(steps)`` of int64 steps that is a pure function of each step.
    """
    memo: dict[int, list[float]] = schedule.__dict__.setdefault("_memo", {})
    start = block << MEMO_BITS
    steps = np.int64(start) + np.arange(MEMO_BLOCK, dtype=np.int64)  # never past 2**63-1
    values: list[float] = schedule.values(steps).tolist()
    while len(memo) >= MEMO_BLOCKS:
        try:
            del memo[next(iter(memo))]
        except (KeyError, RuntimeError, StopIteration):  # another thread got there first
            break
    memo[block] = values
    return values


MEMO_CALLS: set[Any] = set()
"""The ``__call__`` functions that answer an int step in ``[0, 2**63)`` from
``__dict__["_memo"]`` exactly as :func:`memo_fill` fills it (and compute a block only
through it); see :func:`memo_of`."""


def memo_of(schedule: Any) -> dict[int, list[float]] | None:
    """Returns the memo a schedule answers int steps from, or None if it has none.

    For a per-update reader (``Run.value``, ``attach``'s step hook) that reads the hit
    itself, ``memo[step >> MEMO_BITS][step & MEMO_MASK]``, and calls the schedule on a
    miss (a ``KeyError``), which fills the block: the value is the scalar call's, bit for
    bit. The dict is the schedule's own, made empty here if it is new; it is never
    replaced, only filled and trimmed, so the reference stays good. A type whose
    ``__call__`` is not one of :data:`MEMO_CALLS` (an override) gets None.

    Example:
        >>> from globalstep.schedules import Linear
        >>> lr = Linear(0.0, 1.0, 10)
        >>> memo = memo_of(lr)
        >>> lr(5) == memo[5 >> MEMO_BITS][5 & MEMO_MASK]
        True
        >>> memo_of(lambda step: 0.1) is None
        True
    """
    if type(schedule).__call__ not in MEMO_CALLS:
        return None
    memo: dict[int, list[float]] = schedule.__dict__.setdefault("_memo", {})
    return memo
