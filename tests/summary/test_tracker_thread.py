"""The MLflow format never imports or sets up MLflow on the training thread.

A fresh interpreter (tests/summary/tracker_import_probe.py) holds the execution of the
``mlflow`` package until its main thread lets it go: the Run's opening, restore, first
updates and a flush on the main thread return while the import is held, and the only
thread that imports MLflow is the tracker's sender. A tracking URI MLflow refuses when
the client is built there reaches the user at close, in the tracker's warning.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("mlflow")
pytest.importorskip("torch")

PROBE = str(pathlib.Path(__file__).with_name("tracker_import_probe.py"))


def _probe(tmp_path: pathlib.Path, uri: str, close_seconds: float) -> dict:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "MLFLOW_TRACKING_URI": uri,
    }
    env.pop("MLFLOW_EXPERIMENT_NAME", None)
    done = subprocess.run(
        [sys.executable, PROBE, str(tmp_path / "run"), str(close_seconds)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    result: dict = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_first_updates_return_while_the_sender_thread_imports_mlflow(tmp_path):
    """The training thread's Run calls never import MLflow: the sender thread does."""
    # Nothing listens there: the open fails and is retried until the close gives up.
    result = _probe(tmp_path, "http://127.0.0.1:9", close_seconds=0.5)
    assert result["returned_while_held"]
    assert result["importers"], "mlflow was never imported"
    assert result["main"] not in result["importers"]
    assert all(name.startswith("globalstep-mlflow-") for name in result["importers"])


def test_a_tracking_uri_mlflow_refuses_reaches_the_user_at_close(tmp_path):
    """A URI MLflow cannot build a client for is named in the tracker's warning at close."""
    # (the close waits for the build to fail: the sender then stops at once)
    result = _probe(tmp_path, "nosuchscheme://nowhere", close_seconds=600)
    assert result["main"] not in result["importers"]
    (warning,) = [w for w in result["warnings"] if "mlflow tracker" in w]
    assert "the mlflow run could not be opened" in warning
    assert "nosuchscheme" in warning
