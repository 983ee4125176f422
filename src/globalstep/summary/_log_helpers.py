"""Logging keyed to the step: ``log_every_n_steps``.

Unlike a count of calls (TensorFlow's ``log_every_n``, in :mod:`globalstep.compat`), the
step decides: each call site logs the first time it runs with a clock, then each time that
clock has passed a new multiple of ``n`` (see :mod:`globalstep._triggers`). Calls repeated at
one step log once; a step that jumps past a multiple still logs; a resumed run logs where an
uninterrupted one would; a new clock (a second run in the same process) starts afresh.

Example:
    >>> import logging, sys
    >>> from globalstep import Clock
    >>> logger = logging.getLogger("example")
    >>> logger.addHandler(logging.StreamHandler(sys.stdout))
    >>> clock = Clock()
    >>> for _ in range(250):
    ...     clock.tick()
    ...     for _micro_batch in range(4):
    ...         _ = log_every_n_steps(logger, logging.WARNING, 100, "step %d", clock.step,
    ...                               clock=clock)
    step 1
    step 100
    step 200
"""

from __future__ import annotations

import logging
import sys
import threading
import weakref
from typing import Any

from globalstep._clock import Clock
from globalstep._errors import ConfigError
from globalstep._triggers import Trigger, every

__all__ = ["log_every_n_steps"]

# Per clock object (not per clock name: a second run in the same process, with a new clock
# of the same name, starts afresh), then per call site and n.
_triggers: weakref.WeakKeyDictionary[Clock, dict[tuple[str, int, int], Trigger]] = (
    weakref.WeakKeyDictionary()
)
_lock = threading.Lock()


def log_every_n_steps(
    logger: logging.Logger, level: int, n: int, msg: str, *args: Any, clock: Clock
) -> bool:
    """Logs ``msg % args`` when ``clock`` has passed a new multiple of ``n`` steps.

    Args:
        logger: the logger to log through.
        level: the logging level, e.g. ``logging.INFO``.
        n: steps between messages, >= 1.
        msg: the message, formatted lazily with ``args`` as :mod:`logging` does.
        *args: the message's arguments.
        clock: the clock whose step decides.

    Returns:
        True when the message was logged.

    Raises:
        ConfigError: ``n`` is not an int >= 1, ``logger`` is not a Logger or ``clock`` is
            not a Clock.
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError("n", "must be an int >= 1", n)
    if not isinstance(logger, logging.Logger):
        raise ConfigError("logger", "must be a logging.Logger", logger)
    if not isinstance(clock, Clock):
        raise ConfigError("clock", "must be a globalstep Clock", clock)
    frame = sys._getframe(1)
    site = (frame.f_code.co_filename, frame.f_lineno, n)
    with _lock:
        sites = _triggers.setdefault(clock, {})
        trigger = sites.get(site)
        if trigger is None:
            trigger = sites[site] = every(n, start=0)
        fire = trigger.should_fire(clock)
    if fire:
        logger.log(level, msg, *args)
    return fire
