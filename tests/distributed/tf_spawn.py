"""Starts the workers of a TensorFlow multi-worker test: forked by a zygote that imported
TensorFlow and Keras once.

Importing TensorFlow takes seconds (15 s on a busy machine), so each test module starts one
:class:`Zygote` (a Python process that imported them) and forks every worker of its
scenarios from it: a worker then starts its ``MultiWorkerMirroredStrategy`` in well under
a second. TensorFlow starts no thread on import, so forking after it is safe (the strategy,
the servers and their threads are made in the child). Each worker runs
``tf_workers.main(scenario, rank, ports, out)`` on a ``TF_CONFIG`` of ``len(ports)``
workers on 127.0.0.1 and writes its result to ``out/<scenario>-<rank>.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# For all workers together; generous: a hang fails the test after this, not CI's timeout.
CHILD_TIMEOUT_SECONDS = 120

_ZYGOTE = r"""
import os, select, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path[:0] = PATHS
import numpy, tensorflow, keras, tf_workers  # noqa: the point: imported once, forked
print("ready", flush=True)
children = set()
buffer = b""
while True:
    ready, _, _ = select.select([0], [], [], 0.05)
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            break
        children.discard(pid)
        print("exit", pid, os.waitstatus_to_exitcode(status), flush=True)
    if not ready:
        continue
    chunk = os.read(0, 65536)
    if not chunk:
        break
    buffer += chunk
    while b"\n" in buffer:
        line, buffer = buffer.split(b"\n", 1)
        args = line.decode().split("\t")
        pid = os.fork()
        if pid == 0:
            os.dup2(2, 1)  # the zygote's stdout is its protocol
            code = 0
            try:
                tf_workers.main(args[0], int(args[1]), args[2].split(","), args[3])
            except SystemExit as err:
                code = err.code if isinstance(err.code, int) else 1
            except BaseException as err:
                with open(os.path.join(args[3], f"{args[0]}-{args[1]}.error"), "w") as f:
                    f.write(f"{type(err).__name__}: {err}")
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        children.add(pid)
        print("started", pid, flush=True)
"""


def free_ports(count: int) -> list[int]:
    """``count`` ports of 127.0.0.1 free now (bound then released)."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


class Zygote:
    """A process that imported TensorFlow once and forks workers on request."""

    def __init__(self) -> None:
        paths = [str(HERE), *sys.path]
        self.process = subprocess.Popen(
            [sys.executable, "-c", f"PATHS = {paths!r}\n{_ZYGOTE}"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
        )
        self.statuses: dict[int, int] = {}
        self.last: list[int] = []
        self._pending = b""
        assert self._line() == ["ready"]

    def _line(self, timeout: float = CHILD_TIMEOUT_SECONDS) -> list[str]:
        """The zygote's next line (read from its pipe unbuffered: select sees all of it)."""
        stdout = self.process.stdout
        assert stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._pending:
            ready, _, _ = select.select([stdout], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, "the zygote did not answer"
            chunk = os.read(stdout.fileno(), 65536)
            assert chunk, f"the zygote exited with {self.process.wait()}"
            self._pending += chunk
        line, self._pending = self._pending.split(b"\n", 1)
        return line.decode().split()

    def _read(self, timeout: float) -> None:
        line = self._line(timeout)
        assert line[0] == "exit", line
        self.statuses[int(line[1])] = int(line[2])

    def start(self, scenario: str, ports: list[int], out: Path) -> list[int]:
        """Forks one worker per port; returns their pids, by rank."""
        pids = []
        stdin = self.process.stdin
        assert stdin is not None
        for rank in range(len(ports)):
            text = "\t".join([scenario, str(rank), ",".join(map(str, ports)), str(out)])
            stdin.write(text.encode() + b"\n")
            stdin.flush()
            line = self._line()
            while line[0] == "exit":
                self.statuses[int(line[1])] = int(line[2])
                line = self._line()
            pids.append(int(line[1]))
        return pids

    def wait(self, pids: list[int], timeout: float = CHILD_TIMEOUT_SECONDS) -> list[int]:
        """The exit status of each of ``pids`` (negative: killed by that signal); kills
        those still running after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not all(pid in self.statuses for pid in pids):
            left = deadline - time.monotonic()
            if left <= 0:
                for pid in pids:
                    if pid not in self.statuses:
                        with contextlib.suppress(ProcessLookupError):
                            os.kill(pid, signal.SIGKILL)
                deadline = time.monotonic() + 30
                continue
            try:
                self._read(left)
            except AssertionError:
                if time.monotonic() < deadline:
                    raise
        return [self.statuses[pid] for pid in pids]

    def run(
        self,
        scenario: str,
        out: Path,
        *,
        size: int = 2,
        expect: dict[int, int | tuple[int, ...]] | None = None,
        during: Callable[[list[int]], None] | None = None,
    ) -> list[dict[str, Any]]:
        """Runs ``scenario`` on ``size`` workers; returns each one's result. Each must exit
        with ``expect``'s status for its rank, or one of them (default 0; negative: killed
        by that signal)."""
        out.mkdir(parents=True, exist_ok=True)
        pids = self.start(scenario, free_ports(size), out)
        if during is not None:
            during(pids)
        self.last = statuses = self.wait(pids)
        wanted = [(expect or {}).get(r, 0) for r in range(size)]
        failed = [
            f"worker {r} of {scenario!r} exited with {status}: "
            + _read(out / f"{scenario}-{r}.error")
            for r, status in enumerate(statuses)
            if status not in (wanted[r] if isinstance(wanted[r], tuple) else (wanted[r],))
        ]
        assert not failed, "\n".join(failed)
        return [
            json.loads(path.read_text()) if path.exists() else {}
            for path in (out / f"{scenario}-{r}.json" for r in range(size))
        ]

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(30)
        if self.process.stdout is not None:
            self.process.stdout.close()


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else "(no error recorded: killed?)"
