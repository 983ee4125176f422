"""The Run's schedules: names to schedules, checked, and the first read of each.

:meth:`Run.value <globalstep.run.Run.value>` answers a step from the schedule's own memo
(:func:`~globalstep._memo.memo_of`) once it knows it; :func:`first_value` is the
read that calls the schedule and notes its memo (the first read of a name, or a step the
memo does not hold yet).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from globalstep._errors import ConfigError
from globalstep._memo import memo_of

__all__ = ["Memos", "first_value", "schedules_of"]

Memos = dict[str, tuple[Any, dict[int, list[float]]]]
"""Each name's schedule and its memo, as :meth:`Run.value` reads them."""


def schedules_of(schedules: Mapping[str, Any] | None) -> dict[str, Any]:
    """Returns the schedules by name, as a dict of the Run's own.

    Raises:
        ConfigError: a name that is not a str, or a schedule that is not callable.
    """
    out = dict(schedules or {})
    for name, schedule in out.items():
        if not isinstance(name, str) or not callable(schedule):
            raise ConfigError(
                "schedules", "must map names (str) to schedules (callables of the step)", name
            )
    return out


def first_value(schedules: Mapping[str, Any], memos: Memos, name: str, step: int) -> float:
    """Returns schedule ``name`` at ``step``, called, and notes its memo in ``memos``.

    Raises:
        KeyError: no schedule has that name.
    """
    try:
        schedule = schedules[name]
    except KeyError:
        raise KeyError(f"no schedule named {name!r}; this run has {sorted(schedules)}") from None
    value = float(schedule(step))
    own = memo_of(schedule)
    if own is not None:
        memos[name] = (schedule, own)
    return value
