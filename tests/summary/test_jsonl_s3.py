"""JSONL summaries on S3 (a local moto server) beside the same cases on local disk."""

import math

import pytest

from globalstep import ConfigError, SummaryWriter
from globalstep.summary import last_standing_step, read_run


@pytest.fixture(params=["local", "s3"])
def run_dir(request, tmp_path):
    """A run directory on local disk, then on the local S3 server: (logdir, options)."""
    if request.param == "local":
        return str(tmp_path / "run"), None
    server = request.getfixturevalue("s3_server")
    return server.new_url("logs"), server.options


def test_points_read_back(run_dir):
    """Scalars, a histogram and a text written to JSONL read back by step."""
    logdir, options = run_dir
    with SummaryWriter(logdir, formats=("jsonl",), storage_options=options) as writer:
        for step in range(5):
            writer.scalar("loss", 1.0 / (step + 1), step)
        writer.histogram("w", [1.0, 2.0, 3.0], 4)
        writer.text("note", "héllo", 4)
        writer.scalar("bad", math.inf, 4)
    run = read_run(logdir, storage_options=options)
    assert [p.step for p in run.scalars["loss"]] == [0, 1, 2, 3, 4]
    assert run.scalars["loss"][-1].value == 0.2
    assert run.histograms["w"][0].value["num"] == 3
    assert run.texts["note"][0].value == "héllo"
    assert run.scalars["bad"][0].value == math.inf


def test_a_reopened_run_marks_its_restart(run_dir):
    """A second writer going back to step 2 voids the first one's points from step 2 on."""
    logdir, options = run_dir
    with SummaryWriter(logdir, formats=("jsonl",), storage_options=options) as writer:
        for step in range(6):
            writer.scalar("loss", float(step), step)
    assert last_standing_step(logdir, storage_options=options) == 5
    with SummaryWriter(logdir, formats=("jsonl",), storage_options=options) as writer:
        writer.scalar("loss", 20.0, 2)
    run = read_run(logdir, storage_options=options)
    assert [(p.step, p.value) for p in run.scalars["loss"]] == [(0, 0.0), (1, 1.0), (2, 20.0)]


def test_flush_uploads_the_points(s3_server):
    """After flush() the points are in the object, before the writer closes."""
    url = s3_server.new_url("logs")
    with SummaryWriter(url, formats=("jsonl",), storage_options=s3_server.options) as writer:
        writer.scalar("loss", 0.5, 1)
        writer.flush()
        run = read_run(url, storage_options=s3_server.options)
        assert [p.value for p in run.scalars["loss"]] == [0.5]


def test_a_half_line_left_by_a_crash_is_skipped(s3_server):
    """A half line at the end of the object is skipped; the next writer starts a new line."""
    url = s3_server.new_url("logs")
    s3_server.fs.pipe_file(
        url + "/metrics.jsonl", b'{"step": 0, "wall_time": 1.0, "tag": "a", "value": 1.0}\n{"st'
    )
    with SummaryWriter(url, formats=("jsonl",), storage_options=s3_server.options) as writer:
        writer.scalar("a", 2.0, 1)
    run = read_run(url, storage_options=s3_server.options)
    assert [p.value for p in run.scalars["a"]] == [1.0, 2.0]
    assert run.skipped_lines == 1


def test_a_transient_upload_failure_is_retried(s3_server, s3_faults):
    """A 503 answer to a flush's upload is retried; no point is lost."""
    url = s3_server.new_url("logs")
    with SummaryWriter(url, formats=("jsonl",), storage_options=s3_server.options) as writer:
        s3_faults.inject("PUT", "metrics.jsonl", status=503, code="SlowDown")
        writer.scalar("loss", 0.25, 3)
        writer.flush()
    assert s3_faults.injected == 1
    assert [p.step for p in read_run(url, storage_options=s3_server.options).scalars["loss"]] == [3]


def test_event_files_on_a_url_are_refused():
    """Asking for TensorBoard event files on a URL raises ConfigError naming formats."""
    with pytest.raises(ConfigError, match=r"`formats` must be \('jsonl',\) for an fsspec URL"):
        SummaryWriter("memory://globalstep-logs/a", formats=("tensorboard", "jsonl"))


def test_storage_options_on_a_local_logdir_are_refused(tmp_path):
    """storage_options with a local logdir raise ConfigError naming them."""
    with pytest.raises(ConfigError, match="`storage_options` applies to fsspec URL logdirs"):
        SummaryWriter(tmp_path, formats=("jsonl",), storage_options={"anon": True})


def test_reading_a_url_without_jsonl_is_refused():
    """read_run on a URL without metrics.jsonl raises ConfigError naming the directory."""
    with pytest.raises(ConfigError, match=r"`directory` must hold metrics\.jsonl"):
        read_run("memory://globalstep-logs/empty")
