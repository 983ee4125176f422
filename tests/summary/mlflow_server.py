"""A real MLflow tracking server for the tests: MLflow's own uvicorn app on 127.0.0.1.

``mlflow server`` starts this same app (``mlflow.server.fastapi_app:app``) in a uvicorn
child, plus a job runner the tests do not need; starting uvicorn directly, with the
settings ``mlflow server`` hands it through the environment, halves the start-up time on a
busy machine. The store is SQLite, as the issue asks. :meth:`MlflowServer.stop` and
:meth:`MlflowServer.start` stop the server and bring it back on the same port and store.
"""

from __future__ import annotations

import os
import pathlib
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

START_SECONDS = 240  # a start on a machine shared by many (the app imports a lot)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class MlflowServer:
    """``python -m uvicorn mlflow.server.fastapi_app:app`` over a SQLite store in
    ``directory``; ``uri`` is its tracking URI."""

    def __init__(self, directory: pathlib.Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.log = directory / "server.log"

    def start(self) -> None:
        """Starts the server and waits until it answers ``/health``."""
        env = {
            **os.environ,
            "_MLFLOW_SERVER_FILE_STORE": f"sqlite:///{self.directory / 'mlflow.db'}",
            "_MLFLOW_SERVER_ARTIFACT_ROOT": str(self.directory / "artifacts"),
            "_MLFLOW_SGI_NAME": "uvicorn",
            "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        }
        command = [
            sys.executable,
            "-m",
            "uvicorn",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--workers",
            "1",
            "mlflow.server.fastapi_app:app",
        ]
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the MLflow server exited: {self.log.read_text()[-3000:]}")
            if self.healthy():
                self._warm_up()
                return
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"the MLflow server did not start: {self.log.read_text()[-3000:]}")

    def _warm_up(self) -> None:
        """Makes the first store request: the app creates its SQLite tables then (after
        ``/health`` answers), which takes longer than a client's timeout on a busy machine."""
        url = self.uri + "/api/2.0/mlflow/experiments/get-by-name?experiment_name=Default"
        with urllib.request.urlopen(url, timeout=START_SECONDS) as response:
            response.read()

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(self.uri + "/health", timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            return False

    def stop(self) -> None:
        """Stops the server (its port then refuses connections)."""
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)
            self.process = None
