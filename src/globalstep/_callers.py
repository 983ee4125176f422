"""Where a warning points: the user's line, however deep inside globalstep it is raised."""

from __future__ import annotations

import os
import sys

__all__ = ["user_stacklevel"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a ``warnings.warn`` in the function calling this one
    name the first caller outside globalstep (the user's line), however deep the call."""
    frame = sys._getframe(1)
    level = 1
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
        level += 1
    return level
