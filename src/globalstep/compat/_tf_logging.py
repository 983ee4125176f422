"""TensorFlow's call-counting log helpers, ``log_every_n`` and ``log_first_n``.

Same names, argument order and semantics as ``tf.compat.v1.logging``: each call site (file
and line) keeps its own count of calls; ``log_every_n`` logs calls 1, n+1, 2n+1, ... and
``log_first_n`` the first n. They log, as TensorFlow does, through the ``"tensorflow"``
logger of the standard :mod:`logging` module. (TensorFlow's own code keys its counts by
the first frame outside the caller's file, so there all the call sites of one file share a
count; ours keep the per-call-site count its documentation promises.) For logging keyed
to the step rather than to a count of calls, use
:func:`globalstep.summary._log_helpers.log_every_n_steps`.

Example:
    >>> import logging, sys
    >>> logger = logging.getLogger("tensorflow")
    >>> handler = logging.StreamHandler(sys.stdout)
    >>> logger.addHandler(handler)
    >>> for i in range(7):
    ...     log_every_n(logging.WARNING, "call %d", 3, i + 1)
    call 1
    call 4
    call 7
    >>> logger.removeHandler(handler)
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any

from globalstep._errors import ConfigError

__all__ = ["log_every_n", "log_first_n"]

_counts: dict[tuple[str, int], int] = {}
_lock = threading.Lock()


def _next_count(n: Any) -> int:
    """Returns how many times the caller's caller has called before, counting this call."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError("n", "must be an int >= 1", n)
    frame = sys._getframe(2)
    site = (frame.f_code.co_filename, frame.f_lineno)
    with _lock:
        count = _counts.get(site, 0)
        _counts[site] = count + 1
    return count


def log_every_n(level: int, msg: str, n: int, *args: Any) -> None:
    """Logs ``msg % args`` at ``level`` on calls 1, n+1, 2n+1, ... of this call site.

    Raises:
        ConfigError: ``n`` is not an int >= 1.
    """
    if _next_count(n) % n == 0:
        logging.getLogger("tensorflow").log(level, msg, *args)


def log_first_n(level: int, msg: str, n: int, *args: Any) -> None:
    """Logs ``msg % args`` at ``level`` on the first ``n`` calls of this call site.

    Raises:
        ConfigError: ``n`` is not an int >= 1.
    """
    if _next_count(n) < n:
        logging.getLogger("tensorflow").log(level, msg, *args)
