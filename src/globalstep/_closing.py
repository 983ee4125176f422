"""The one context-manager base of objects that hold something until ``close()``."""

from __future__ import annotations

from types import TracebackType
from typing import TypeVar

__all__ = ["Closing"]

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
