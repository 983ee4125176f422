"""Starts the ranks of a multi-process test around one TCPStore held by the test process.

The ranks are forked by a fork server that has imported torch (and torch._dynamo, which
DDP's constructor imports) once: a fresh interpreter per rank would import them again in
each, seconds apiece on a loaded machine. Forking the test process itself instead can hang
a child on a lock that one of the test process's threads (the store's server, torch's
thread pool) held at the fork. Each rank runs :func:`workers.main` (or the ``main`` of the
workers module named by ``module``) and writes its result to a JSON file.
"""

from __future__ import annotations

import datetime
import importlib
import json
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

# For all ranks together; generous: a hang fails the test after this, not CI's timeout.
CHILD_TIMEOUT_SECONDS = 60


def _rank(module: str, scenario: str, rank: int, size: int, port: int, out: Path) -> None:
    try:
        importlib.import_module(module).main(scenario, rank, size, port, out)
    except BaseException as err:
        (out / f"{scenario}-{rank}.error").write_text(f"{type(err).__name__}: {err}")
        raise


def spawn(
    scenario: str,
    size: int,
    out: Path,
    *,
    killed: tuple[int, ...] = (),
    module: str = "workers",
    statuses: Mapping[int, int] | None = None,
    during: Callable[[list[Any]], None] | None = None,
    store: Any = None,
    timeout: float = CHILD_TIMEOUT_SECONDS,
) -> list[dict[str, Any]]:
    """Runs ``scenario`` on ``size`` forked processes; returns each rank's result.

    The ranks in ``killed`` must end by SIGKILL (the scenario kills them; their result
    is ``{}`` where they wrote none); those in ``statuses`` with the status given there;
    the others must exit with status 0. ``module`` names the workers module (on this
    directory's path) whose ``main`` runs the scenario. ``during``, where given, is called
    with the started processes (to signal them from outside) before they are joined.
    ``store``, where given, is the TCPStore to use (one that outlives a call, as torchrun's
    agent's does its workers), else a new one is made for the call.

    The store lives in this process on a free port of 127.0.0.1, so no port is guessed.
    Ranks that do not finish within ``timeout`` seconds (all together) are killed and the
    call fails.
    """
    import torch.distributed as dist

    if store is None:
        store = dist.TCPStore(
            "127.0.0.1",
            0,
            is_master=True,
            wait_for_workers=False,
            timeout=datetime.timedelta(seconds=timeout),
        )
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["torch.distributed", "torch._dynamo", "workers", module])
    children = [
        context.Process(target=_rank, args=(module, scenario, r, size, store.port, out))
        for r in range(size)
    ]
    for child in children:
        child.start()
    deadline = time.monotonic() + timeout
    try:
        if during is not None:
            during(children)
        for child in children:
            child.join(max(0.0, deadline - time.monotonic()))
    finally:
        for child in children:
            if child.is_alive():
                child.kill()
                child.join()
    failed = [
        f"rank {r} of {scenario!r} exited with {child.exitcode}: "
        + _read(out / f"{scenario}-{r}.error")
        for r, child in enumerate(children)
        if child.exitcode != (-signal.SIGKILL if r in killed else (statuses or {}).get(r, 0))
    ]
    assert not failed, "\n".join(failed)
    del store
    results = [out / f"{scenario}-{r}.json" for r in range(size)]
    return [
        json.loads(path.read_text()) if r not in killed or path.exists() else {}
        for r, path in enumerate(results)
    ]


def _read(path: Path) -> str:
    return path.read_text() if os.path.exists(path) else "(no error recorded: killed?)"
