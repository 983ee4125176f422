"""Closing things: the one context-manager base of objects that hold something until
``close()``, and closing several in order."""

from __future__ import annotations

from types import TracebackType
from typing import Protocol, TypeVar

__all__ = ["Closing", "close_in_order"]

_Self = TypeVar("_Self", bound="Closing")


class Closing:
    """A context manager that calls ``close()`` on exit (``_close_after`` may refine it).

    Example:
        >>> class Resource(Closing):
        ...     def close(self) -> None:
        ...         print("closed")
        >>> with Resource():
        ...     pass
        closed
    """

    def close(self) -> None:
        """Releases what the object holds."""

    def _close_after(self, error: BaseException | None) -> None:
        self.close()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._close_after(exc)


class _Closable(Protocol):
    def close(self) -> None: ...


def close_in_order(*parts: _Closable | None, catching: type[BaseException] = Exception) -> None:
    """Closes each part (None skipped), even after one raises ``catching``; then raises
    the first such error (any other error propagates at once).

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
        except catching as err:
            first = first or err
    if first is not None:
        raise first
