"""End to end: a real `tensorboard --logdir` server serves the scalars our writer wrote."""

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from globalstep import Clock, SummaryWriter

pytest.importorskip("tensorboard")

_TIMEOUT_SECONDS = 120


def _free_port():
    """Returns a TCP port free on the loopback interface."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get_json(url):
    """Returns the JSON body at url, or None while the server cannot answer it yet."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())
    except (urllib.error.URLError, ConnectionError, json.JSONDecodeError):
        return None


@pytest.mark.slow
def test_tensorboard_server_serves_our_scalars(tmp_path):
    """The scalars endpoint of a live server returns our run's steps and values, restart applied."""
    clock = Clock()
    with SummaryWriter(tmp_path / "run1", clock=clock, formats=("tensorboard",)) as writer:
        for _ in range(30):
            clock.tick()
            writer.scalar("loss", 1.0 / clock.step)
    clock.load_state_dict({**clock.state_dict(), "step": 20, "step_in_epoch": 20})
    with SummaryWriter(tmp_path / "run1", clock=clock, formats=("tensorboard",)) as writer:
        for _ in range(20):
            clock.tick()
            writer.scalar("loss", 2.0 / clock.step)
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "tensorboard.main",
        "--logdir",
        str(tmp_path),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--reload_interval",
        "1",
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    log = tmp_path / "tensorboard.log"
    with open(log, "wb") as log_file:
        server = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=env)
    query = urllib.parse.urlencode({"run": "run1", "tag": "loss"})
    url = f"http://127.0.0.1:{port}/data/plugin/scalars/scalars?{query}"
    try:
        deadline = time.monotonic() + _TIMEOUT_SECONDS
        series = None
        while time.monotonic() < deadline and server.poll() is None:
            series = _get_json(url)
            if isinstance(series, list) and len(series) == 40:
                break
            time.sleep(0.5)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert isinstance(series, list), (
        f"no answer from {url} within {_TIMEOUT_SECONDS}s; the server said:\n"
        + log.read_text(errors="replace")[-2000:]
    )
    steps = [step for _wall, step, _value in series]
    values = [value for _wall, _step, value in series]
    assert steps == list(range(1, 41))
    expected = [1.0 / s if s <= 20 else 2.0 / s for s in range(1, 41)]
    assert values == pytest.approx(expected, rel=1e-6)
