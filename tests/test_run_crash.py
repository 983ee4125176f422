"""Run under SIGKILL: weights bit-identical and every step logged once, in every viewer.

A Run-based NumPy loop (tests/run_loop.py) is killed at 10 random moments, some just
after a checkpoint began to commit and some at random times between the writer's
flushes, and resumed after each kill; the final run is compared with an uninterrupted one.
"""

import csv
import importlib.util
import io
import json
import os
import pathlib
import queue
import random
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest

from globalstep import CheckpointManager
from globalstep.summary import read_run

LOOP = str(pathlib.Path(__file__).with_name("run_loop.py"))
TOTAL_STEPS = 200
SLEEP_SECONDS = 0.003
_SERVER_SECONDS = 120


def _start(directory, writer, *loop):
    """Starts the loop (``loop``: run_loop.py's further arguments, LOOP [KILL_AT]); a thread
    queues its output lines."""
    return _spawn(LOOP, directory, TOTAL_STEPS, writer, SLEEP_SECONDS, *loop)


def _spawn(script, *args):
    """Starts ``python script args...``; a thread queues its output lines (None at the end)."""
    process = subprocess.Popen(
        [sys.executable, str(script), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = queue.Queue()

    def pump():
        with process.stdout:
            for line in process.stdout:
                lines.put(line.strip())
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    return process, lines


def _wait_for(lines, prefix):
    """Returns the first line starting with prefix, or None if the process ended first."""
    while True:
        line = lines.get(timeout=120)
        if line is None:
            return None
        if line.startswith(prefix):
            return line


def _run_to_end(directory, writer, *loop):
    """Runs the loop to its end; returns its output lines."""
    process, lines = _start(directory, writer, *loop)
    output = []
    while (line := lines.get(timeout=300)) is not None:
        output.append(line)
    assert process.wait(timeout=60) == 0, "\n".join(output)
    return output


def _crash_and_resume(directory, writer, seed, *loop, readies=None, saved=0):
    """Kills the loop at 10 moments (4 inside a save, ``saved`` right after a commit, the
    rest at random), then runs it to the end; appends each attempt's ``ready`` line to
    ``readies`` where given.

    Returns how many kills left a checkpoint half written (a temporary directory).
    """
    rng = random.Random(seed)
    moments = ["save"] * 4 + ["saved"] * saved + ["random"] * (6 - saved)
    rng.shuffle(moments)
    inside_saves = 0
    for moment in moments:
        process, lines = _start(directory, writer, *loop)
        ready = _wait_for(lines, "ready")
        assert ready is not None
        if readies is not None:
            readies.append(ready)
        remaining = TOTAL_STEPS - int(ready.split()[1])
        if moment == "save" and remaining > 25:  # a save before the last one
            _wait_for(lines, "save ")
            time.sleep(rng.uniform(0, 0.002))
        elif moment == "saved" and remaining > 25:  # after a commit, however slow the machine
            _wait_for(lines, "saved ")
            time.sleep(rng.uniform(0, 0.002))
        else:
            # Every step sleeps SLEEP_SECONDS: within this window the run does at most
            # half the steps it has left, so it cannot end before the kill, however fast
            # the machine is.
            time.sleep(rng.uniform(0.0, min(0.4, 0.5 * remaining * SLEEP_SECONDS)))
        process.kill()
        process.wait(timeout=60)
        checkpoints = pathlib.Path(directory, "checkpoints")
        inside_saves += any(p.name.startswith(".tmp") for p in checkpoints.iterdir())
    assert not pathlib.Path(directory, "weights").exists(), "a run ended before its kill"
    output = _run_to_end(directory, writer, *loop)
    if readies is not None:
        readies.extend(line for line in output if line.startswith("ready"))
    return inside_saves


def _series(logs, tags):
    """Each tag's (step, value) pairs in the JSONL reader, `globalstep logs --csv -` and
    TensorBoard's EventAccumulator (on the event files alone), by reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    log = read_run(logs)
    out = subprocess.run(
        [sys.executable, "-m", "globalstep", "logs", str(logs), "--csv", "-"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    accumulator = EventAccumulator(str(logs), size_guidance={"scalars": 0})
    accumulator.Reload()
    return {
        "jsonl": {t: [(p.step, p.value) for p in log.scalars.get(t, [])] for t in tags},
        "csv": {
            t: [(int(r["step"]), float(r["value"])) for r in rows if r["tag"] == t] for t in tags
        },
        "tensorboard": {t: [(e.step, e.value) for e in accumulator.Scalars(t)] for t in tags},
    }


def _assert_same_curves(logs, reference_logs, tags):
    """Every reader shows each of ``tags`` with each step once (at most), as it shows the
    uninterrupted run's (event files hold float32)."""
    expected = _series(reference_logs, tags)
    assert expected["jsonl"] == expected["csv"]
    for tag in tags:
        steps = [step for step, _ in expected["jsonl"][tag]]
        assert steps == sorted(set(steps)), f"{tag}: a step twice in the uninterrupted run"
        float32 = [(s, float(np.float32(v))) for s, v in expected["jsonl"][tag]]
        assert expected["tensorboard"][tag] == float32, tag
    assert _series(logs, tags) == expected


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get_json(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.loads(response.read())
    except (urllib.error.URLError, ConnectionError, json.JSONDecodeError, TimeoutError):
        return None


def _served_series(logdir, runs, load_fast, results):
    """Starts `tensorboard` on logdir and stores the (step, value) pairs it serves per run."""
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "tensorboard.main",
        "--logdir",
        str(logdir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--reload_interval",
        "1",
        f"--load_fast={load_fast}",
    ]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    log = pathlib.Path(logdir, f"tensorboard-{load_fast}.log")
    with open(log, "wb") as log_file:
        server = subprocess.Popen(command, stdout=log_file, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}/data/plugin/scalars/scalars?"
    served = {}
    try:
        deadline = time.monotonic() + _SERVER_SECONDS
        while time.monotonic() < deadline and server.poll() is None and len(served) < len(runs):
            for run in runs:
                series = _get_json(base + urllib.parse.urlencode({"run": run, "tag": "loss"}))
                # The server loads in the background: wait until it has read the last step.
                if isinstance(series, list) and series and series[-1][1] == TOTAL_STEPS:
                    served[run] = series
            time.sleep(0.5)
        time.sleep(1.5)  # one more reload: nothing may change once the last step is in
        for run in served:
            served[run] = _get_json(base + urllib.parse.urlencode({"run": run, "tag": "loss"}))
    finally:
        server.terminate()
        server.wait(timeout=30)
    results[load_fast] = (served, log.read_text(errors="replace")[-2000:])


def _in_threads(*calls):
    """Runs each (function, args) in a thread; re-raises the first failure."""
    errors = []

    def call(function, args):
        try:
            function(*args)
        except BaseException as err:
            errors.append(err)

    threads = [threading.Thread(target=call, args=c) for c in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


@pytest.mark.slow
def test_sigkilled_run_resumes_exactly(tmp_path):
    """10 SIGKILLs and resumes, with the writer opened before and after the restore: the
    weights match bit for bit and each step 1..N is logged once with the uninterrupted
    run's value, in the JSONL reader, `globalstep logs`, EventAccumulator and a real
    TensorBoard server with either loader."""
    pytest.importorskip("tensorboard")
    reference = tmp_path / "reference"
    inside = {}
    _in_threads(
        (_run_to_end, (reference, "after")),
        *[
            (
                lambda w, seed: inside.__setitem__(w, _crash_and_resume(tmp_path / w, w, seed)),
                (w, i),
            )
            for i, w in enumerate(("before", "after"))
        ],
    )
    print(f"kills inside a checkpoint commit, of 10: {inside}")
    expected = [(p.step, p.value) for p in read_run(reference / "logs").scalars["loss"]]
    assert [s for s, _ in expected] == list(range(1, TOTAL_STEPS + 1))
    float32 = [(s, float(np.float32(v))) for s, v in expected]

    for writer in ("before", "after"):
        crashed = tmp_path / writer
        assert (crashed / "weights").read_bytes() == (reference / "weights").read_bytes()

        # The JSONL reader, `globalstep logs DIR --csv -` and TensorBoard's Python reader.
        _assert_same_curves(crashed / "logs", reference / "logs", ["loss"])
        assert read_run(crashed / "logs").restarts, "the kills should have left restart marks"

    # A real server, with its Python loader and with its default one, side by side.
    results = {}
    runs = ["before/logs", "after/logs"]
    _in_threads(*[(_served_series, (tmp_path, runs, mode, results)) for mode in ("false", "auto")])
    for mode, (served, server_log) in results.items():
        for run in runs:
            series = served.get(run)
            assert isinstance(series, list), (
                f"--load_fast={mode} did not serve {run}:\n{server_log}"
            )
            assert [(step, value) for _wall, step, value in series] == float32, (mode, run)


@pytest.mark.slow
def test_sigkilled_loop_counting_in_its_dict_saves_every_count(tmp_path):
    """Issue 33, point 3, under SIGKILL: the loop counts in a dict of plain numbers it
    passed to restore() (restored in place). Killed at 10 random moments and resumed, each
    resume restores the count of its step into that dict; every checkpoint kept holds the
    count of its step, bit for bit the uninterrupted run's; the final weights, counts and
    curve are the uninterrupted run's."""
    reference, crashed = tmp_path / "reference", tmp_path / "crashed"
    readies = []
    _in_threads(
        (_run_to_end, (reference, "after")),
        (lambda: _crash_and_resume(crashed, "after", 33, readies=readies, saved=2), ()),
    )
    resumed = [tuple(int(n) for n in line.split()[1:]) for line in readies]
    assert len(resumed) == 11
    assert any(step > 0 for step, _ in resumed), resumed
    assert all(updates == step for step, updates in resumed), resumed

    assert (crashed / "weights").read_bytes() == (reference / "weights").read_bytes()
    meta = (crashed / "meta.json").read_text()
    assert meta == (reference / "meta.json").read_text()
    assert json.loads(meta)["updates"] == TOTAL_STEPS

    with (
        CheckpointManager(reference / "checkpoints", read_only=True) as straight,
        CheckpointManager(crashed / "checkpoints", read_only=True) as again,
    ):
        steps = again.steps()
        assert steps == straight.steps()
        assert steps[-1] == TOTAL_STEPS
        for step in steps:
            kept, expected = again.restore(step=step)["state"], straight.restore(step=step)["state"]
            assert kept["meta"]["updates"] == step
            assert json.dumps(kept["meta"]) == json.dumps(expected["meta"]), step
            assert kept["weights"].tobytes() == expected["weights"].tobytes(), step

    expected_curve = [(p.step, p.value) for p in read_run(reference / "logs").scalars["loss"]]
    assert [s for s, _ in expected_curve] == list(range(1, TOTAL_STEPS + 1))
    log = read_run(crashed / "logs")
    assert [(p.step, p.value) for p in log.scalars["loss"]] == expected_curve
    assert log.restarts
    if importlib.util.find_spec("tensorboard") is not None:  # and in the other readers
        _assert_same_curves(crashed / "logs", reference / "logs", ["loss"])


SKIPS_TAGS = ["loss", "lr", "skipped/loss", "skipped/lr", "run/skipped_updates"]


def _assert_skips_logged(logs):
    """The uninterrupted "skips" loop's curves: the main tags at each step 1..N once, the
    skipped attempts at the step of the update that applied after them, among them the
    first update after each checkpoint; once or twice in a row."""
    scalars = read_run(logs).scalars
    for tag in ("loss", "lr"):
        assert [p.step for p in scalars[tag]] == list(range(1, TOTAL_STEPS + 1)), tag
    counts = {p.step: p.value for p in scalars["run/skipped_updates"]}
    assert {26, 51, 76} <= set(counts), counts
    assert set(counts.values()) == {1.0, 2.0}, counts
    assert [p.step for p in scalars["skipped/loss"]] == sorted(counts)


def test_skipped_update_after_a_checkpoint_then_a_kill(tmp_path):
    """An update skipped right after the checkpoint of step 25, the process SIGKILLed then
    (its logs flushed), and resumed: each step once per tag, equal to the uninterrupted
    run's, in the JSONL reader, `globalstep logs --csv` and EventAccumulator; the point of
    step 25, which the checkpoint covers, is there; the weights match bit for bit."""
    pytest.importorskip("tensorboard")
    reference, crashed = tmp_path / "reference", tmp_path / "crashed"
    _run_to_end(reference, "after", "skips")
    process, lines = _start(crashed, "after", "skips", "25")
    assert _wait_for(lines, "saved 25") is not None
    assert process.wait(timeout=120) == -9, "the loop should have killed itself"
    _run_to_end(crashed, "after", "skips")
    # The update that made the step 25 logged its loss before the checkpoint committed.
    covered = next(p.value for p in read_run(reference / "logs").scalars["loss"] if p.step == 25)
    at_25 = [p.value for p in read_run(crashed / "logs").scalars["loss"] if p.step == 25]
    assert at_25 == [covered], "the point of step 25, which the checkpoint covers, is lost"
    _assert_skips_logged(reference / "logs")
    assert (crashed / "weights").read_bytes() == (reference / "weights").read_bytes()
    _assert_same_curves(crashed / "logs", reference / "logs", SKIPS_TAGS)


@pytest.mark.slow
def test_sigkilled_run_with_skipped_updates_resumes_exactly(tmp_path):
    """The "skips" loop (gradient accumulation, updates skipped by a loss scale, some right
    after a checkpoint), SIGKILLed at 10 random moments (4 inside a save) and resumed:
    the weights match bit for bit, and every tag, the skipped attempts' included, holds
    each step once with the uninterrupted run's values in every reader."""
    pytest.importorskip("tensorboard")
    reference, crashed = tmp_path / "reference", tmp_path / "crashed"
    inside = {}
    _in_threads(
        (_run_to_end, (reference, "after", "skips")),
        (lambda: inside.__setitem__(0, _crash_and_resume(crashed, "before", 7, "skips")), ()),
    )
    print(f"kills inside a checkpoint commit, of 10: {inside[0]}")
    _assert_skips_logged(reference / "logs")
    assert (crashed / "weights").read_bytes() == (reference / "weights").read_bytes()
    _assert_same_curves(crashed / "logs", reference / "logs", SKIPS_TAGS)
    assert read_run(crashed / "logs").restarts, "the kills should have left restart marks"
