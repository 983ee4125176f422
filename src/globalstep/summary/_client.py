"""A tracker's client: the protocol any tool's client follows, and the checks of one.

:class:`TrackerClient` is what :class:`~globalstep.summary._tracker.Tracker` sends to:
MLflow's and W&B's clients (``summary/_mlflow.py``, ``summary/_wandb.py``) are two, a
user's (Comet, Neptune, ClearML, a file) plugs in as ``Tracker(name, client=...)``
(docs/add-a-tracker.md). The checks here refuse, when the ``Tracker`` is made, a name that
cannot name a record and a ``client`` that cannot build a client.
"""

from __future__ import annotations

import re
from typing import Any, Protocol, runtime_checkable

from globalstep._errors import ConfigError
from globalstep.summary._record import TRACKERS

__all__ = [
    "CLIENT_METHODS",
    "Point",
    "TrackerClient",
    "check_builder",
    "check_name",
    "checked_client",
]

Point = tuple[str, int, float, float]
"""A point sent to a tracker: (tag, step, value, wall_time in seconds since the epoch)."""


@runtime_checkable
class TrackerClient(Protocol):
    """The client of one tracking tool: what a :class:`Tracker` needs to send to it.

    MLflow's and W&B's clients (``summary/_mlflow.py``, ``summary/_wandb.py``) are two;
    a client of your own (Comet, Neptune, ClearML, a file) plugs in as
    ``Tracker("comet", client=CometClient)``, ``client`` being what builds it: called
    with no arguments on the tracker's sender thread, the client's methods too, so that
    importing the tool and setting it up never holds the training thread. Three methods:

    - :meth:`open` starts the tool's run or continues the one the log directory's record
      names, and returns its id (kept in the record);
    - :meth:`send` sends a batch of points; returning means the tool holds them (the
      record notes them sent), raising means it does not: the same points are sent again
      (retried with backoff, or by the next writer that opens the directory once this
      one closed; :class:`~globalstep._errors.TrackerRefusedError` refuses them for good);
    - :meth:`close` ends what :meth:`open` started.

    A client may also have ``set_params(params: Mapping[str, Any]) -> None``, which
    records the run's configuration (``Run``'s ``config``) as the tool's parameters; a
    client without it is given none. A build that fails, or builds no client, gives the
    tracker up (the warning at close says why; the points stay in the record). Any
    exception of the methods but ``TrackerRefusedError`` is retried with backoff.
    """

    def open(self, run_id: str | None, *, logdir: str, key: str) -> str:
        """Starts a new tracker run (``run_id`` None) or continues ``run_id``; returns
        the run's id. Follows the tool's own conventions (environment variables, a run
        the user started).

        ``key`` names the training run (32 hex digits, made when the directory's record
        was; the same for every process that resumes it): store it in the tracker run
        and, with ``run_id`` None, continue the tracker run that has it if there is one
        (a process killed after the tracker made the run and before its id reached the
        record), or use it as the run's id where the tool takes one (W&B)."""

    def send(self, points: list[Point]) -> None:
        """Sends ``(tag, step, value, wall_time)`` scalars, in order; returns once the
        tool holds them, raises on failure (``TrackerRefusedError``: for good)."""

    def close(self) -> None:
        """Ends what :meth:`open` started (not a run the user started)."""


CLIENT_METHODS = ("open", "send", "close")
"""The methods every :class:`TrackerClient` has (``set_params`` is optional)."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")  # a tracker's name: its record's file name


def checked_client(client: Any) -> TrackerClient:
    """Returns ``client`` where it has the methods of a :class:`TrackerClient`.

    Raises:
        ConfigError: one is missing (or is not callable).
    """
    missing = [m for m in CLIENT_METHODS if not callable(getattr(client, m, None))]
    if missing:
        raise ConfigError(
            "client",
            f"must build a TrackerClient, with the methods {', '.join(CLIENT_METHODS)} "
            f"(this one lacks {', '.join(missing)})",
            client,
        )
    return client  # type: ignore[no-any-return]  # its methods checked above


def check_name(name: Any, client: Any) -> None:
    """Refuses a tracker's ``name``: not a built-in tracker's without a ``client``, not a
    file name."""
    if client is None and name not in TRACKERS:
        raise ConfigError(
            "name",
            f"must be one of {TRACKERS}, the trackers globalstep has a client for, unless "
            "client= builds a client of your own (see TrackerClient)",
            name,
        )
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(
            "name",
            "must be a str of letters, digits, '_' and '-', not starting with '_' or '-' "
            "(the record is <logdir>/<name>.tracker.jsonl)",
            name,
        )


def check_builder(client: Any) -> None:
    """Refuses a ``client`` that cannot build a :class:`TrackerClient`: not callable, a
    client rather than what builds it, a class without a client's methods."""
    if client is None:
        return
    if not isinstance(client, type) and callable(getattr(client, "send", None)):
        raise ConfigError(
            "client",
            "must build the client (a class, or a function returning one), not be the "
            "client: it is built on the tracker's sender thread when a writer opens",
            client,
            hint=f"Pass {type(client).__name__} (or lambda: the_client).",
        )
    if not callable(client):
        raise ConfigError("client", "must be callable (building a client) or None", client)
    if isinstance(client, type):
        checked_client(client)
