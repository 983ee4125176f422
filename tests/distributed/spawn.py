"""Starts the ranks of a multi-process test around one TCPStore held by the test process.

The ranks are forked from the test process, which has imported torch already: starting a
fresh interpreter per rank would import torch again in each (seconds apiece on a loaded
machine). Each rank runs :func:`workers.main` and writes its result to a JSON file.
"""

from __future__ import annotations

import datetime
import importlib
import json
import multiprocessing
import os
from pathlib import Path
from typing import Any

import workers

# Generous: a hang fails the test after this, instead of eating CI's time.
CHILD_TIMEOUT_SECONDS = 60


def _rank(scenario: str, rank: int, size: int, port: int, out: Path) -> None:
    try:
        workers.main(scenario, rank, size, port, out)
    except BaseException as err:
        (out / f"{scenario}-{rank}.error").write_text(f"{type(err).__name__}: {err}")
        raise


def spawn(scenario: str, size: int, out: Path) -> list[dict[str, Any]]:
    """Runs ``scenario`` on ``size`` forked processes; returns each rank's result.

    The store lives in this process on a free port of 127.0.0.1, so no port is guessed.
    Ranks that do not finish within the timeout are killed and the call fails.
    """
    import torch.distributed as dist

    if scenario != "counter":
        # DDP's constructor imports torch._dynamo (seconds): once here, not once per rank.
        importlib.import_module("torch._dynamo")
    store = dist.TCPStore(
        "127.0.0.1",
        0,
        is_master=True,
        wait_for_workers=False,
        timeout=datetime.timedelta(seconds=CHILD_TIMEOUT_SECONDS),
    )
    context = multiprocessing.get_context("fork")
    children = [
        context.Process(target=_rank, args=(scenario, r, size, store.port, out))
        for r in range(size)
    ]
    for child in children:
        child.start()
    try:
        for child in children:
            child.join(CHILD_TIMEOUT_SECONDS)
    finally:
        for child in children:
            if child.is_alive():
                child.kill()
                child.join()
    failed = [
        f"rank {r} of {scenario!r} exited with {child.exitcode}: "
        + _read(out / f"{scenario}-{r}.error")
        for r, child in enumerate(children)
        if child.exitcode != 0
    ]
    assert not failed, "\n".join(failed)
    del store
    return [json.loads((out / f"{scenario}-{r}.json").read_text()) for r in range(size)]


def _read(path: Path) -> str:
    return path.read_text() if os.path.exists(path) else "(no error recorded: killed?)"
