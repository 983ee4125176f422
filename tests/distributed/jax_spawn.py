"""Starts the processes of a JAX multi-process test on 127.0.0.1 (a free port each time).

Each process is a fresh interpreter (``python SCRIPT PORT RANK SIZE ...``) with this
test's ``sys.path``; JAX's coordination service runs in process 0.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# For all processes together; generous: a hang fails the test after this, not CI's timeout.
CHILD_TIMEOUT_SECONDS = 120


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def environment(**extra: str) -> dict[str, str]:
    """This process's environment, its ``sys.path`` passed on, JAX on the CPU."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), *sys.path])
    env["JAX_PLATFORMS"] = "cpu"
    env["PYTHON"] = sys.executable
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env.update(extra)
    return env


def start(
    script: str, size: int, args: list[str], log: Path, **env: str
) -> list[subprocess.Popen[bytes]]:
    """Starts ``size`` processes of ``script`` (in this folder); their output to ``log``-RANK."""
    port = str(free_port())
    children = []
    for rank in range(size):
        with open(f"{log}-{rank}.log", "ab") as output:
            children.append(
                subprocess.Popen(
                    [sys.executable, str(HERE / script), port, str(rank), str(size), *args],
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    env=environment(**env),
                )
            )
    return children


def finish(
    children: list[subprocess.Popen[bytes]], timeout: float = CHILD_TIMEOUT_SECONDS
) -> list[int]:
    """Waits for ``children`` (killing what is left after ``timeout``); their statuses."""
    statuses = []
    deadline = time.monotonic() + timeout
    for child in children:
        try:
            statuses.append(child.wait(max(0.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            child.kill()
            statuses.append(child.wait())
    return statuses
