"""The W&B tracker client against wandb itself, offline: what reaches W&B's own files.

Every check reads back the transaction log (``run-<id>.wandb``) that wandb's service wrote,
through the framing reader of ``globalstep.summary._wandb``; the reader itself is checked
against wandb's own records (a record split across blocks, a torn tail, a damaged chunk).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import uuid
from pathlib import Path

import pytest

wandb = pytest.importorskip("wandb")

from globalstep import ConfigError  # noqa: E402
from globalstep._errors import TrackerRefusedError  # noqa: E402
from globalstep.summary._wandb import (  # noqa: E402
    STEP_METRIC,
    WandbClient,
    history_rows,
    read_records,
    wandb_files,
)


@pytest.fixture(scope="module", autouse=True)
def _no_service_left():
    """Tears W&B's service down after this module: wandb leaves its address in
    ``WANDB_SERVICE``, which any subprocess a later test starts would inherit."""
    yield
    wandb.teardown()


@pytest.fixture
def offline(monkeypatch):
    """W&B offline and quiet, with no project, directory or run from the environment."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for name in ("WANDB_DIR", "WANDB_PROJECT", "WANDB_RUN_ID", "WANDB_RESUME"):
        monkeypatch.delenv(name, raising=False)
    yield
    if wandb.run is not None:
        wandb.finish()


@pytest.fixture
def wandb_env(offline, monkeypatch):
    """Sets environment variables for W&B to read again: wandb reads its environment once
    a process (``wandb.setup``), so the setup is torn down before and after the test."""

    def setenv(**variables):
        for name, value in variables.items():
            monkeypatch.setenv(name, value)
        wandb.teardown()

    yield setenv
    if wandb.run is not None:
        wandb.finish()
    wandb.teardown()


def _key():
    """A fresh training-run key, as the tracker record makes one (32 hex digits)."""
    return uuid.uuid4().hex


def _records(logdir, run_id, *, finished=True):
    """Every record of every transaction log of ``run_id`` under ``logdir``, by file.

    ``run.finish()`` returns before W&B's service has written the end of its file offline:
    with ``finished``, each file is read until it ends with the run's exit record (a
    bounded wait, not a timing assumption about the test).
    """
    files = wandb_files(str(logdir), run_id)
    assert files, f"no transaction log of {run_id} under {logdir}"
    found = []
    for path in files:
        deadline = time.monotonic() + 60
        while True:
            records = read_records(path).records
            done = records and records[-1].WhichOneof("record_type") == "exit"
            if not finished or done or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        found.append(records)
    return found


def _history(logdir, run_id, *, finished=True):
    """Our rows (those with the global step), across the run's files, in order."""
    return [
        row
        for records in _records(logdir, run_id, finished=finished)
        for row in history_rows(records)
        if STEP_METRIC in row
    ]


def _of_kind(records, kind):
    return [r for r in records if r.WhichOneof("record_type") == kind]


def test_points_reach_the_transaction_log_as_rows_on_the_global_step(offline, tmp_path):
    """Points at one step share a row; values (bit for bit), wall times, config, axis."""
    client = WandbClient(flush_seconds=0.05)
    run_id = client.open(None, logdir=str(tmp_path), key=_key())
    assert wandb.run is not None
    assert wandb.run.id == run_id
    client.set_params({"lr": 0.1, "model": {"width": 8}})
    third = 0.1 + 0.2  # 0.30000000000000004: exactness of the JSON round trip
    client.send([("loss", 1, 1.5, 1000.25), ("lr", 1, third, 1000.25), ("loss", 2, 1.25, 1001.5)])
    # send returned: the rows are in W&B's file already, before any finish.
    assert [row[STEP_METRIC] for row in _history(tmp_path, run_id, finished=False)] == [1, 2]
    client.send([("loss", 3, math.inf, 1002.0)])
    client.close()
    assert wandb.run is None  # the client started the run, so it finished it

    rows = _history(tmp_path, run_id)
    assert [(r[STEP_METRIC], r.get("loss"), r.get("lr"), r["_timestamp"]) for r in rows] == [
        (1, 1.5, third, 1000.25),
        (2, 1.25, None, 1001.5),
        (3, math.inf, None, 1002.0),
    ]
    (records,) = _records(tmp_path, run_id)
    config = {
        item.key: json.loads(item.value_json)
        for record in _of_kind(records, "config")
        for item in record.config.update
    }
    assert config["lr"] == 0.1
    assert config["model"] == {"width": 8}
    metrics = {r.metric.name: r.metric.step_metric for r in _of_kind(records, "metric")}
    assert metrics["loss"] == STEP_METRIC
    assert metrics["lr"] == STEP_METRIC
    assert os.path.dirname(wandb_files(str(tmp_path), run_id)[0]).startswith(
        str(tmp_path / "wandb")
    )


def test_a_relative_log_directory_is_the_one_of_the_working_directory_now(
    offline, tmp_path, monkeypatch
):
    """W&B's service was started elsewhere (an earlier run of this process): the client's
    relative directory still means the current working directory's, where send looks."""
    (tmp_path / "before").mkdir()
    (tmp_path / "now").mkdir()
    monkeypatch.chdir(tmp_path / "before")
    wandb.init(dir=".").finish()  # the service starts with this working directory
    monkeypatch.chdir(tmp_path / "now")
    client = WandbClient(flush_seconds=0.05, confirm_seconds=20)
    run_id = client.open(None, logdir="logs", key=_key())
    client.send([("loss", 1, 0.5, 1000.0)])
    client.close()
    assert [r[STEP_METRIC] for r in _history(tmp_path / "now" / "logs", run_id)] == [1]


def test_a_resumed_client_continues_the_run_and_skips_the_steps_it_holds(offline, tmp_path):
    """Same run id in both files; a resent step is not logged twice, and is counted."""
    first = WandbClient(flush_seconds=0.05)
    run_id = first.open(None, logdir=str(tmp_path), key=_key())
    first.send([("loss", step, step / 10, 1000.0 + step) for step in range(1, 5)])
    first.close()

    second = WandbClient(flush_seconds=0.05)
    assert second.open(run_id, logdir=str(tmp_path), key=_key()) == run_id
    # Steps 3 and 4 reached W&B before the "crash": the resumed backend sends them again.
    second.send([("loss", step, step / 10, 1000.0 + step) for step in range(3, 7)])
    second.close()

    assert [r[STEP_METRIC] for r in _history(tmp_path, run_id)] == [1, 2, 3, 4, 5, 6]
    runs = [_of_kind(records, "run")[0].run for records in _records(tmp_path, run_id)]
    assert [run.run_id for run in runs] == [run_id, run_id]

    other = WandbClient(flush_seconds=0.05)
    assert other.open(None, logdir=str(tmp_path / "elsewhere"), key=_key()) != run_id
    other.close()


def test_a_process_killed_before_recording_the_id_is_continued_through_the_key(offline, tmp_path):
    """``open(None, key=K)`` twice (the first process died before its record held the
    id): one W&B run, id K, and the first one's steps are not logged again."""
    key = _key()
    first = WandbClient(flush_seconds=0.05)
    assert first.open(None, logdir=str(tmp_path), key=key) == key
    first.send([("loss", 1, 0.1, 1000.0), ("loss", 2, 0.2, 1001.0)])
    first.close()
    second = WandbClient(flush_seconds=0.05)
    assert second.open(None, logdir=str(tmp_path), key=key) == key
    second.send([("loss", 2, 0.2, 1001.0), ("loss", 3, 0.3, 1002.0)])
    second.close()
    assert [(r[STEP_METRIC], r["loss"]) for r in _history(tmp_path, key)] == [
        (1, 0.1),
        (2, 0.2),
        (3, 0.3),
    ]


def test_an_active_wandb_run_is_used_and_left_open(offline, tmp_path):
    """The user's ``wandb.run`` receives the rows; close() does not finish it."""
    run = wandb.init(
        dir=str(tmp_path), settings=wandb.Settings(x_transaction_log_flush_interval=0.05)
    )
    client = WandbClient(flush_seconds=0.05)
    assert client.open(None, logdir=str(tmp_path / "logs"), key=_key()) == run.id
    client.send([("loss", 7, 0.5, 1000.0)])
    client.close()
    assert wandb.run is run
    wandb.finish()
    assert [(r[STEP_METRIC], r["loss"]) for r in _history(tmp_path, run.id)] == [(7, 0.5)]


def test_an_active_run_with_another_id_than_the_directory_is_refused(offline, tmp_path):
    wandb.init(dir=str(tmp_path), id="activerun1")
    with pytest.raises(
        TrackerRefusedError, match=r"wandb.run is W&B run 'activerun1'.*continues W&B run 'saved01'"
    ):
        WandbClient().open("saved01", logdir=str(tmp_path), key=_key())


def test_settings_wandb_refuses_are_refused_for_good(wandb_env, tmp_path):
    """``WANDB_MODE`` with a value W&B does not know: its settings error, refused for good."""
    wandb_env(WANDB_MODE="sideways")
    with pytest.raises(TrackerRefusedError, match=r"wandb\.init refused to start the run"):
        WandbClient().open(None, logdir=str(tmp_path), key=_key())


def test_wandb_project_and_wandb_dir_are_followed(wandb_env, tmp_path):
    """``WANDB_PROJECT`` names the project, ``WANDB_DIR`` replaces the log directory."""
    wandb_env(WANDB_PROJECT="globalstep-tests", WANDB_DIR=str(tmp_path / "wandb-home"))
    client = WandbClient(flush_seconds=0.05)
    run_id = client.open(None, logdir=str(tmp_path / "logs"), key=_key())
    client.close()
    assert not (tmp_path / "logs" / "wandb").exists()
    (records,) = _records(tmp_path / "wandb-home", run_id)
    assert _of_kind(records, "run")[0].run.project == "globalstep-tests"


def test_a_send_not_confirmed_in_time_raises_and_its_retry_logs_nothing_twice(wandb_env, tmp_path):
    """With W&B flushing its file only at finish, send times out; the retry re-logs
    nothing, and every row is in the file once after close. (W&B's service is torn down
    after: a later run of this process's service was seen not to flush its file at its
    own interval after this one.)"""
    wandb_env()
    client = WandbClient(flush_seconds=3600, confirm_seconds=0.2)
    run_id = client.open(None, logdir=str(tmp_path), key=_key())
    points = [("loss", 1, 1.0, 1000.0), ("loss", 2, 2.0, 1001.0)]
    with pytest.raises(TimeoutError, match=r"2 rows logged to W&B run .*`confirm_seconds`"):
        client.send(points)
    with pytest.raises(TimeoutError, match="3 rows logged"):
        client.send([*points, ("loss", 3, 3.0, 1002.0)])
    client.close()
    assert [r[STEP_METRIC] for r in _history(tmp_path, run_id)] == [1, 2, 3]


def test_points_that_would_fold_the_curve_back_are_refused_before_any_is_logged(offline, tmp_path):
    """A step at or below one sent already (in a batch, or before), or the axis's own
    name: TrackerRefusedError, and nothing of that batch reaches W&B."""
    client = WandbClient(flush_seconds=0.05)
    run_id = client.open(None, logdir=str(tmp_path), key=_key())
    client.send([("loss", 5, 0.5, 1000.0)])
    for batch, message in [
        ([("lr", 5, 0.1, 1000.0), ("loss", 5, 0.4, 1000.0)], r"'loss' at step 5: .*up to step 5"),
        ([("loss", 6, 0.3, 1001.0), ("loss", 6, 0.2, 1001.0)], r"'loss' at step 6: .*up to step 6"),
        ([(STEP_METRIC, 7, 7.0, 1002.0)], r"'global_step' is the axis itself"),
    ]:
        with pytest.raises(TrackerRefusedError, match=message):
            client.send(batch)
    client.send([("loss", 6, 0.3, 1001.0)])  # what the backend sends once it halved
    client.close()
    rows = _history(tmp_path, run_id)
    assert [(r[STEP_METRIC], r.get("loss"), r.get("lr")) for r in rows] == [
        (5, 0.5, None),
        (6, 0.3, None),
    ]


def test_calls_before_open_and_bad_options_raise(offline):
    with pytest.raises(RuntimeError, match="send was called before open"):
        WandbClient().send([("loss", 1, 1.0, 0.0)])
    with pytest.raises(RuntimeError, match="set_params was called before open"):
        WandbClient().set_params({"lr": 0.1})
    with pytest.raises(ConfigError, match=r"`confirm_seconds` must be > 0; got confirm_seconds=0"):
        WandbClient(confirm_seconds=0)
    with pytest.raises(ConfigError, match=r"`flush_seconds` must be > 0; got flush_seconds=-1"):
        WandbClient(flush_seconds=-1)


def test_mode_disabled_sends_without_a_file(wandb_env, tmp_path):
    """``WANDB_MODE=disabled``: W&B keeps nothing, and send does not wait for a file."""
    wandb_env(WANDB_MODE="disabled")
    client = WandbClient(confirm_seconds=0.1)
    client.open(None, logdir=str(tmp_path), key=_key())
    client.send([("loss", 1, 1.0, 1000.0)])  # nothing to confirm: returns at once
    client.close()
    assert not (tmp_path / "wandb").exists()


# The reader, against files wandb wrote.


@pytest.fixture
def written(offline, tmp_path):
    """A finished run whose config record (a 70 KB string) spans three 32 KiB blocks."""
    client = WandbClient(flush_seconds=0.05)
    run_id = client.open(None, logdir=str(tmp_path), key=_key())
    client.set_params({"notes": "x" * 70_000})
    client.send([("loss", step, float(step), 1000.0) for step in range(1, 4)])
    client.close()
    _records(tmp_path, run_id)  # the whole file written
    (path,) = wandb_files(str(tmp_path), run_id)
    return path


def test_the_reader_joins_a_record_split_across_blocks(written):
    log = read_records(written)
    assert not log.damaged
    assert log.end == os.path.getsize(written)
    (config,) = [r for r in log.records if r.WhichOneof("record_type") == "config"]
    assert json.loads(config.config.update[0].value_json) == "x" * 70_000
    assert [r[STEP_METRIC] for r in history_rows(log.records) if STEP_METRIC in r] == [1, 2, 3]
    assert log.records[-1].WhichOneof("record_type") == "exit"


def test_the_reader_stops_at_a_torn_tail_and_reads_on_from_its_end(written, tmp_path):
    data = Path(written).read_bytes()
    whole = read_records(written)
    torn = tmp_path / "torn.wandb"
    torn.write_bytes(data[:-3])  # the last record cut short, as a killed writer leaves it
    log = read_records(str(torn))
    assert not log.damaged
    assert len(log.records) == len(whole.records) - 1
    torn.write_bytes(data)  # the writer goes on: reading from `end` finds the rest
    rest = read_records(str(torn), log.end)
    assert [r.num for r in rest.records] == [whole.records[-1].num]


def test_the_reader_reports_a_damaged_chunk(written, tmp_path):
    data = bytearray(Path(written).read_bytes())
    data[200] ^= 0xFF
    bad = tmp_path / "bad.wandb"
    bad.write_bytes(bytes(data))
    log = read_records(str(bad))
    assert log.damaged
    assert log.end < 200
    assert len(log.records) < len(read_records(written).records)


def test_the_reader_refuses_a_file_that_is_not_a_transaction_log(tmp_path):
    pytest.importorskip("wandb.proto.wandb_internal_pb2")
    path = tmp_path / "run-x.wandb"
    path.write_bytes(b"not a log at all")
    with pytest.raises(ValueError, match="is not a W&B transaction log"):
        read_records(str(path))


def test_without_wandb_the_client_names_the_extra(monkeypatch):
    from globalstep import MissingDependencyError

    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb raises ImportError
    with pytest.raises(MissingDependencyError, match=r"globalstep\[wandb\]"):
        WandbClient()


def test_the_files_of_a_run_come_oldest_first_with_wandbs_suffixes(tmp_path):
    """Two starts in one second: W&B adds ``-1``, ``-2`` to the directory's name."""
    names = [
        "run-20260101_000000-abc",  # an online start
        "offline-run-20260101_000001-abc",
        "offline-run-20260101_000001-abc-1",
        "offline-run-20260101_000001-abc-2",
        "offline-run-20260101_000002-abc",
    ]
    for name in [*reversed(names), "offline-run-20260101_000001-abcd", "latest-run"]:
        folder = tmp_path / "wandb" / name
        folder.mkdir(parents=True)
        (folder / "run-abc.wandb").write_bytes(b"")
    found = wandb_files(str(tmp_path), "abc")
    assert [os.path.basename(os.path.dirname(p)) for p in found] == names
