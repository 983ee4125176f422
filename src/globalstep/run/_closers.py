"""Closing a Run's parts in order: every one is closed, and the first error is raised."""

from __future__ import annotations

from typing import Protocol

__all__ = ["close_in_order"]


class _Closable(Protocol):
    def close(self) -> None: ...


def close_in_order(*parts: _Closable | None) -> None:
    """Closes each part (None skipped), even after one raises; then raises the first error.

    Example:
        >>> class Part:
        ...     def __init__(self, name): self.name = name
        ...     def close(self): print("closed", self.name)
        >>> close_in_order(Part("checkpoints"), None, Part("writer"))
        closed checkpoints
        closed writer
    """
    first: BaseException | None = None
    for part in parts:
        if part is None:
            continue
        try:
            part.close()
        except Exception as err:
            first = first or err
    if first is not None:
        raise first
