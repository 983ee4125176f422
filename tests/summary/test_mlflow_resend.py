"""Points an MLflow outage left unsent reach MLflow when the directory is opened again.

A Run completes while the MLflow server (tests/summary/mlflow_server.py, started once for
the module) is down: its writer's close warns, naming the command that sends the rest.
Then rerunning the complete Run, opening a SummaryWriter on its log directory, or
``globalstep logs DIR --send`` sends them, and the server holds every point once, however
often the directory is opened again. The training thread never imports MLflow.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys
import textwrap
import threading

import pytest

pytest.importorskip("mlflow")

from test_mlflow import EXPERIMENT, PATIENT, _env, _history, _the_run, client, server

from globalstep import Run, SummaryWriter
from globalstep._errors import TrackerWarning
from globalstep.summary import Tracker
from globalstep.summary._tracker import CHECKPOINT_TAG, record_path, unsent_points

__all__ = ["client", "server"]  # the fixtures, shared with test_mlflow.py

STEPS = 10
# The writer of the outage: quick retries, and a close that gives up soon.
OUTAGE = Tracker("mlflow", retry_seconds=0.05, max_retry_seconds=0.2, close_seconds=1)


def _train(directory, tracker, total_steps=STEPS):
    """Runs (or reruns) a Run logging ``loss`` to JSONL and MLflow; returns its output."""
    import io

    stream = io.StringIO()
    with Run(
        directory,
        total_steps=total_steps,
        save_every=5,
        progress=False,
        handle_signals=False,
        stream=stream,
        writer_options={"formats": ("jsonl", tracker)},
        checkpoint_options={"ledger": False},  # no goodput/* points: the counts are exact
    ) as run:
        run.restore({})
        while not run.done:
            run.update(loss=1.0 / (run.step + 1))
    return stream.getvalue()


def _logs(directory):
    return str(pathlib.Path(directory, "logs"))


def _outage(directory, server):
    """A Run that completes while the server is down; returns the close warning's text."""
    server.stop()
    try:
        with pytest.warns(TrackerWarning, match=r"12 points were not sent to MLflow") as got:
            _train(directory, OUTAGE)
    finally:
        server.start()
    assert unsent_points(record_path(_logs(directory), "mlflow")) == 12  # 10 losses, 2 ckpts
    return str(got[0].message)


def _assert_each_point_once(client, directory):
    got = _the_run(client, directory)
    assert _history(client, got.info.run_id, "loss") == [(s, 1.0 / s) for s in range(1, 11)]
    assert _history(client, got.info.run_id, CHECKPOINT_TAG) == [(5, 5.0), (10, 10.0)]
    assert unsent_points(record_path(_logs(directory), "mlflow")) == 0


def test_the_close_warning_names_the_command_that_sends_the_rest(tmp_path, server, client):
    text = _outage(tmp_path, server)
    assert f"run `globalstep logs {_logs(tmp_path)} --send` once the server is reachable" in text


def test_rerunning_a_complete_run_sends_what_an_outage_left(tmp_path, server, client):
    _outage(tmp_path, server)
    output = _train(tmp_path, PATIENT)
    assert "the run is complete" in output
    _assert_each_point_once(client, tmp_path)
    _train(tmp_path, PATIENT)  # opened again: nothing more to send, nothing doubled
    _assert_each_point_once(client, tmp_path)


def test_a_writer_opened_on_the_directory_sends_what_an_outage_left(tmp_path, server, client):
    _outage(tmp_path, server)
    SummaryWriter(_logs(tmp_path), formats=(PATIENT,)).close()
    _assert_each_point_once(client, tmp_path)
    SummaryWriter(_logs(tmp_path), formats=(PATIENT,)).close()
    _assert_each_point_once(client, tmp_path)


def _send(directory, env, *options):
    return subprocess.run(
        [sys.executable, "-m", "globalstep._cli", "logs", str(directory), "--send", *options],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


def test_logs_send_sends_what_an_outage_left_and_says_so(tmp_path, server, client):
    _outage(tmp_path, server)
    done = _send(tmp_path, _env(server))
    assert done.returncode == 0, done.stderr
    record = record_path(_logs(tmp_path), "mlflow")
    run_id = _the_run(client, tmp_path).info.run_id
    # (MLflow prints its own "View run" lines when the run ends)
    assert f"{record}: sent 12 points to MLflow (run {run_id})" in done.stdout.splitlines()
    _assert_each_point_once(client, tmp_path)
    again = _send(tmp_path, _env(server))
    assert again.returncode == 0, again.stderr
    assert again.stdout == f"{record}: nothing to send (every point is in MLflow already)\n"
    _assert_each_point_once(client, tmp_path)


def test_logs_send_without_a_tracker_record_says_so(tmp_path, server):
    with SummaryWriter(tmp_path, formats=("jsonl",)) as writer:
        writer.scalar("loss", 1.0, step=1)
    done = _send(tmp_path, _env(server))
    assert done.returncode == 1
    assert done.stdout == ""
    assert "`DIR` must hold a tracker record (mlflow.tracker.jsonl, wandb.tracker.jsonl)" in (
        done.stderr
    ), done.stderr
    assert str(tmp_path) in done.stderr


class _Down:
    """A client whose server is down: every call fails."""

    name = "mlflow"

    def open(self, run_id, *, logdir, key):
        raise ConnectionError("server down")

    def send(self, points):
        raise ConnectionError("server down")

    def close(self):
        pass


def test_logs_send_to_an_unreachable_server_fails_and_keeps_the_points(tmp_path, server):
    down = Tracker("mlflow", client=_Down, retry_seconds=0.01, close_seconds=0.1)
    with SummaryWriter(tmp_path, formats=(down,)) as writer:
        for step in range(1, 4):
            writer.scalar("loss", 1.0, step=step)
        with pytest.warns(TrackerWarning, match="3 points were not sent to MLflow"):
            writer.close()
    env = {**_env(server), "MLFLOW_TRACKING_URI": "http://127.0.0.1:1"}
    done = _send(tmp_path, env, "--send-seconds", "5")
    assert done.returncode == 1
    record = record_path(str(tmp_path), "mlflow")
    expected = (
        f"globalstep logs: error: {re.escape(record)}: 3 of 3 points could not be sent to "
        r"MLflow within --send-seconds=5 \((last error: .+|no answer yet)\); they stay in the "
        "record: run this again once the server is reachable\n"
    )
    assert re.fullmatch(expected, done.stderr), done.stderr
    assert unsent_points(record) == 3  # kept for the next try


def test_the_mlflow_client_is_built_on_the_sender_thread(tmp_path, server, client, monkeypatch):
    from globalstep.summary import _mlflow

    built = []
    original = _mlflow.MlflowClient.__init__

    def noted(self, *args, **kwargs):
        built.append(threading.current_thread())
        original(self, *args, **kwargs)

    monkeypatch.setattr(_mlflow.MlflowClient, "__init__", noted)
    with SummaryWriter(tmp_path, formats=(PATIENT,)) as writer:
        writer.scalar("loss", 1.0, step=1)
    assert len(built) == 1
    assert built[0] is not threading.current_thread()
    assert built[0].name.startswith("globalstep-mlflow-")


_BLOCKED_IMPORT = """
import sys, threading
seen = []

class Blocker:  # holds the import of mlflow off the main thread, noting the thread
    def find_spec(self, name, path=None, target=None):
        thread = threading.current_thread()
        if name == "mlflow" and thread is not threading.main_thread():
            seen.append(thread.name)
            threading.Event().wait()
        return None

sys.meta_path.insert(0, Blocker())
from globalstep import Clock, SummaryWriter
from globalstep.summary import Tracker

clock = Clock()
writer = SummaryWriter(sys.argv[1], clock=clock, formats=("jsonl", Tracker("mlflow")))
clock.tick()
writer.scalars({"loss": 1.0})
writer.flush()
print("mlflow imported:", "mlflow" in sys.modules, flush=True)
import time
while not seen:
    time.sleep(0.01)
print("asked by:", seen[0].split("-")[:2], flush=True)
import os
os._exit(0)
"""


def test_the_training_thread_never_imports_mlflow(tmp_path, server):
    script = tmp_path / "blocked.py"
    script.write_text(textwrap.dedent(_BLOCKED_IMPORT))
    env = {**_env(server), "MLFLOW_EXPERIMENT_NAME": EXPERIMENT}
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "logs")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "mlflow imported: False",
        "asked by: ['globalstep', 'mlflow']",
    ]
    assert re.search(r"Traceback", done.stderr) is None, done.stderr
    assert os.path.exists(record_path(str(tmp_path / "logs"), "mlflow"))
