"""MLflow as a writer format, against a real MLflow tracking server on 127.0.0.1.

The server is MLflow's own app over a SQLite store (tests/summary/mlflow_server.py),
started once for the module. A Run loop (tests/summary/mlflow_loop.py) is run
uninterrupted, and again SIGKILLed at 3 random updates and resumed: ``MlflowClient`` shows
one MLflow run for it whose ``loss`` and ``lr`` histories hold each step once, equal to the
uninterrupted run's, with the configuration as its parameters and each committed
checkpoint's step. Then the server is stopped for part of a run: training goes on, the
warning counts the points dropped, the points after the server came back arrive, and the
JSONL file holds every point.
"""

from __future__ import annotations

import os
import pathlib
import queue
import random
import re
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("mlflow")

from mlflow_server import MlflowServer

from globalstep import Run
from globalstep._errors import TrackerWarning
from globalstep.summary import Tracker, read_run
from globalstep.summary._mlflow import LOGDIR_TAG, flat_params
from globalstep.summary._tracker import CHECKPOINT_TAG, record_path

LOOP = str(pathlib.Path(__file__).with_name("mlflow_loop.py"))
TOTAL_STEPS = 40
EXPERIMENT = "globalstep-tests"
# The MLflow format with room for a server slowed down by a busy machine at close (the
# default close_seconds=10 can pass before a loaded server answered the last batches).
PATIENT = Tracker("mlflow", close_seconds=240)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    started = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    started.start()
    yield started
    started.stop()


@pytest.fixture
def client(server, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.uri)
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", EXPERIMENT)
    return MlflowClient(server.uri)


def _env(server):
    src = str(pathlib.Path(__file__).resolve().parents[2] / "src")
    path = os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])
    return {
        **os.environ,
        "MLFLOW_TRACKING_URI": server.uri,
        "MLFLOW_EXPERIMENT_NAME": EXPERIMENT,
        "PYTHONPATH": path,
    }


def _start(directory, server, sleep_seconds=0.0):
    process = subprocess.Popen(
        [sys.executable, LOOP, str(directory), str(TOTAL_STEPS), str(sleep_seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=_env(server),
    )
    lines: queue.Queue[str | None] = queue.Queue()

    def pump():
        with process.stdout:
            for line in process.stdout:
                lines.put(line.strip())
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return process, lines


def _run_to_end(directory, server):
    process, lines = _start(directory, server)
    output = []
    while (line := lines.get(timeout=300)) is not None:
        output.append(line)
    assert process.wait(timeout=120) == 0, "\n".join(output)


def _killed_at(directory, server, step):
    """Starts the loop and SIGKILLs it once it printed ``step S``; returns where it resumed."""
    process, lines = _start(directory, server, sleep_seconds=0.002)
    ready, output = None, []
    while (line := lines.get(timeout=300)) is not None:
        output.append(line)
        if line.startswith("ready"):
            ready = int(line.split()[1])
        if line == f"step {step}":
            process.kill()
            break
    process.wait(timeout=60)
    assert ready is not None, "\n".join(output)
    assert line == f"step {step}", "\n".join(output)  # killed there, not ended
    return ready


def _runs(client, directory):
    """The MLflow runs of a run directory (found by the tag the client sets)."""
    logdir = os.path.abspath(pathlib.Path(directory, "logs"))
    experiment = client.get_experiment_by_name(EXPERIMENT)
    if experiment is None:
        return []
    return client.search_runs(
        [experiment.experiment_id], filter_string=f"tags.`{LOGDIR_TAG}` = '{logdir}'"
    )


def _the_run(client, directory):
    """The one MLflow run of a run directory."""
    runs = _runs(client, directory)
    assert len(runs) == 1, [r.info.run_id for r in runs]
    return runs[0]


def _history(client, run_id, tag):
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, tag))


@pytest.mark.slow
def test_a_sigkilled_run_shows_each_step_once_in_one_mlflow_run(tmp_path, server, client):
    reference, crashed = tmp_path / "reference", tmp_path / "crashed"
    _run_to_end(reference, server)
    kills = sorted(random.Random(28).sample(range(3, TOTAL_STEPS - 2), 3))
    resumed = [_killed_at(crashed, server, step) for step in kills]
    _run_to_end(crashed, server)
    print(f"killed at {kills}, resumed at {resumed}")
    assert resumed[0] == 0
    assert resumed[1:] == [k // 5 * 5 for k in kills[:-1]]  # from the newest checkpoint

    expected, got = _the_run(client, reference), _the_run(client, crashed)
    for tag in ("loss", "lr"):
        history = _history(client, got.info.run_id, tag)
        assert [s for s, _ in history] == list(range(1, TOTAL_STEPS + 1)), tag
        assert history == _history(client, expected.info.run_id, tag), tag
    # The local curves say the same (the JSONL reader applies the restarts).
    local = read_run(crashed / "logs").scalars["loss"]
    assert [(p.step, p.value) for p in local] == _history(client, got.info.run_id, "loss")
    # The configuration as parameters, the committed checkpoints' steps, one run id.
    params = got.data.params
    assert params == expected.data.params
    assert params["rows"] == "32"
    assert params["model.features"] == "8"
    assert params["model.kind"] == "linear"
    checkpoints = _history(client, got.info.run_id, CHECKPOINT_TAG)
    assert [s for s, _ in checkpoints] == list(range(5, TOTAL_STEPS + 1, 5))
    assert all(float(s) == v for s, v in checkpoints)
    assert got.info.status == "FINISHED"
    record = pathlib.Path(record_path(str(crashed / "logs"), "mlflow")).read_text()
    assert set(re.findall(r'\{"run": "(\w+)"\}', record)) == {got.info.run_id}


def test_an_uninterrupted_run_in_mlflow(tmp_path, server, client):
    """In this process: a Run's curves, parameters and checkpoints in one MLflow run."""
    config = {"rows": 32, "opt": {"name": "sgd", "betas": [0.9, 0.99]}}
    run = Run(
        tmp_path,
        total_steps=12,
        save_every=4,
        config=config,
        progress=False,
        handle_signals=False,
        writer_options={"formats": ("jsonl", PATIENT)},
    )
    with run:
        run.restore({})
        while not run.done:
            run.update(loss=1.0 / (run.step + 1), lr=0.1)
    got = _the_run(client, tmp_path)
    assert _history(client, got.info.run_id, "loss") == [(s, 1.0 / s) for s in range(1, 13)]
    assert _history(client, got.info.run_id, "lr") == [(s, 0.1) for s in range(1, 13)]
    assert [s for s, _ in _history(client, got.info.run_id, CHECKPOINT_TAG)] == [4, 8, 12]
    params = got.data.params
    for key, value in flat_params(config).items():
        assert params[key] == value
    assert params["opt.betas"] == "[0.9, 0.99]"


def _update(run, lr=0.1):
    run.update(loss=1.0 / (run.step + 1), lr=lr)


@pytest.mark.slow
def test_a_stopped_server_never_stops_training(tmp_path, server, client):
    tracker = Tracker(
        "mlflow", max_pending=60, retry_seconds=0.05, max_retry_seconds=0.2, close_seconds=120
    )
    run = Run(
        tmp_path,
        save_every=5,
        progress=False,
        handle_signals=False,
        writer_options={"formats": ("jsonl", tracker)},
        checkpoint_options={"ledger": False},  # no goodput/* points: the counts are exact
    )
    with run:
        run.restore({})
        started = time.perf_counter()
        for _ in range(20):
            _update(run)
        up_seconds = time.perf_counter() - started
        deadline = time.monotonic() + 120
        while not _runs(client, tmp_path):  # the sender thread creates the run
            assert time.monotonic() < deadline, "the MLflow run was never created"
            time.sleep(0.1)
        run_id = _the_run(client, tmp_path).info.run_id
        while len(client.get_metric_history(run_id, "loss")) < 20:  # steps 1..20 arrive
            assert time.monotonic() < deadline, "the points before the outage never arrived"
            time.sleep(0.1)
        server.stop()
        started = time.perf_counter()
        for _ in range(100):  # the server is down for all of these updates
            _update(run)
        down_seconds = time.perf_counter() - started
        assert run.step == 120
        server.start()
        for _ in range(20):
            _update(run)
        with pytest.warns(TrackerWarning, match=r"dropped (\d+) points past its buffer") as got:
            run.close()
    print(f"20 updates with the server up: {up_seconds:.3f} s; 100 down: {down_seconds:.3f} s")
    dropped = int(re.search(r"dropped (\d+) points", str(got[0].message)).group(1))
    local = read_run(tmp_path / "logs").scalars
    assert [p.step for p in local["loss"]] == list(range(1, 141))  # JSONL: every point
    assert [p.step for p in local["lr"]] == list(range(1, 141))
    histories = {tag: _history(client, run_id, tag) for tag in ("loss", "lr", CHECKPOINT_TAG)}
    logged = 2 * 140 + 140 // 5  # loss and lr at each step, one point per checkpoint
    assert dropped > 0
    assert sum(len(h) for h in histories.values()) + dropped == logged
    for tag in ("loss", "lr"):
        steps = [s for s, _ in histories[tag]]
        assert len(steps) == len(set(steps)), tag  # each step at most once
        assert steps[:20] == list(range(1, 21)), tag
        assert steps[-20:] == list(range(121, 141)), tag  # after the server came back
        values = {p.step: p.value for p in local[tag]}
        assert all(values[s] == v for s, v in histories[tag]), tag


def test_a_resumed_run_keeps_its_parameters_and_names_those_that_changed(tmp_path, client):
    import warnings

    from globalstep._errors import ConfigDriftWarning

    def train(total_steps, config):
        options = {"formats": ("jsonl", PATIENT)}
        with Run(
            tmp_path,
            total_steps=total_steps,
            config=config,
            progress=False,
            handle_signals=False,
            writer_options=options,
        ) as run:
            run.restore({})
            while not run.done:
                run.update(loss=1.0)

    train(3, {"lr": 0.1})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train(6, {"lr": 0.2, "width": 8})
    kinds = {type(w.message) for w in caught}
    assert kinds == {ConfigDriftWarning, TrackerWarning}, [str(w.message) for w in caught]
    [tracker] = [w for w in caught if isinstance(w.message, TrackerWarning)]
    text = str(tracker.message)
    assert "the run's parameters could not be set" in text
    assert "MLflow cannot change a run's parameters; kept the old values of lr: '0.1' -> '0.2'" in (
        text
    )
    assert "not sent" not in text
    got = _the_run(client, tmp_path)
    assert got.data.params["lr"] == "0.1"
    assert got.data.params["width"] == "8"  # a new key is logged
    assert [s for s, _ in _history(client, got.info.run_id, "loss")] == list(range(1, 7))


def test_mlflow_s_own_http_retries_are_kept_short_unless_the_user_set_them(monkeypatch):
    from globalstep.summary._mlflow import MlflowClient

    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "33")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1")
    MlflowClient()
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "0"
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "33"  # the user's value wins


def test_a_batch_to_a_server_is_the_json_mlflow_s_own_client_would_post():
    """The batch body made here decodes to what MLflow's client encodes for the points."""
    import json

    from mlflow.entities import Metric
    from mlflow.protos.service_pb2 import LogBatch
    from mlflow.utils.proto_json_utils import message_to_json

    from globalstep.summary._mlflow import _batch_json

    nan, inf = float("nan"), float("inf")
    points = [("loss", 3, 0.5, 1764441600.2504), ("a/ü", 2, nan, 1.0), ("b", 0, inf, 1.0)]
    points += [("c", 1, -inf, 2.0), ("d", 7, -0.0, 3.0005), ("e", 8, 1e300, 4.0)]
    metrics = [Metric(t, v, round(w * 1000), s).to_proto() for t, s, v, w in points]
    theirs = json.loads(message_to_json(LogBatch(metrics=metrics, run_id="abc")))
    assert json.loads(_batch_json("abc", points)) == theirs


def test_batches_to_a_server_go_through_its_rest_store_and_others_through_the_client(
    server, monkeypatch
):
    """A tracking server takes the batch made here; another store gets MLflow's log_batch."""
    from types import SimpleNamespace

    from globalstep.summary._mlflow import MlflowClient, _batch_endpoint

    monkeypatch.setenv("MLFLOW_TRACKING_URI", server.uri)
    assert MlflowClient()._post_batch is not None
    other = SimpleNamespace(_tracking_client=SimpleNamespace(store=object()))
    assert _batch_endpoint(other) is None
