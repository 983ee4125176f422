"""Tests for globalstep.summary._reader: JSONL and event files, restarts applied."""

import json
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from globalstep import ConfigError, MissingDependencyError, SummaryWriter
from globalstep.summary import find_runs, last_standing_step, read_logs, read_run


def test_malformed_records_are_skipped(tmp_path):
    """Lines that are not records (bad JSON, lists, missing keys) are counted, not fatal."""
    lines = [
        {"step": 1, "wall_time": 1.0, "tag": "x", "value": 1.0},
        [1, 2],
        {"step": 2, "tag": "x", "value": 2.0},
        {"step": 3, "wall_time": 1.0, "tag": "x"},
        7,
    ]
    text = "\n".join(json.dumps(line) for line in lines) + "\nnot json\n\n"
    (tmp_path / "metrics.jsonl").write_text(text)
    run = read_run(tmp_path)
    assert [p.step for p in run.scalars["x"]] == [1]
    assert run.skipped_lines == 5


def test_a_line_cut_inside_a_utf8_character_is_skipped(tmp_path):
    """A crashed writer's line that ends mid-character is one skipped line, not an error."""
    good = json.dumps({"step": 1, "wall_time": 1.0, "tag": "é", "value": 1.0}, ensure_ascii=False)
    second = good.replace('"step": 1', '"step": 2').encode()
    cut = second[: second.index("é".encode()) + 1]  # ends inside "é"
    later = good.replace('"step": 1', '"step": 3').encode()
    (tmp_path / "metrics.jsonl").write_bytes(good.encode() + b"\n" + cut + b"\n" + later + b"\n")
    run = read_run(tmp_path)
    assert [p.step for p in run.scalars["é"]] == [1, 3]
    assert run.skipped_lines == 1


def test_runs_are_found_at_any_depth(tmp_path):
    """Each directory holding logs is a run, named by its path under the log directory."""
    for name in ("a", "b/c"):
        with SummaryWriter(tmp_path / name, formats=("jsonl",)) as writer:
            writer.scalar("x", 1.0, step=0)
    (tmp_path / "empty").mkdir()
    assert [run.name for run in read_logs(tmp_path)] == ["a", "b/c"]


def test_not_a_directory(tmp_path):
    """A path that is not a directory is refused, naming it."""
    with pytest.raises(ConfigError, match="must be an existing directory"):
        find_runs(tmp_path / "absent")
    with pytest.raises(ConfigError, match="`directory` must be an existing directory"):
        read_run(tmp_path / "absent")


def test_event_files_without_the_extra_name_it(tmp_path, monkeypatch):
    """Reading a run of event files alone without the tensorboard extra says what to install."""
    pytest.importorskip("tensorboard")
    with SummaryWriter(tmp_path, formats=("tensorboard",)) as writer:
        writer.scalar("x", 1.0, step=0)
    monkeypatch.setitem(sys.modules, "tensorboard.compat.proto.event_pb2", None)
    with pytest.raises(MissingDependencyError, match=r"pip install 'globalstep\[tensorboard\]'"):
        read_run(tmp_path)


def test_reads_tensorboardx_event_files(tmp_path):
    """Event files written by tensorboardX are read, so `globalstep logs` covers them too."""
    tensorboardx = pytest.importorskip("tensorboardX")
    writer = tensorboardx.SummaryWriter(str(tmp_path))
    for step in range(5):
        writer.add_scalar("loss", float(step), step)
    writer.close()
    run = read_run(tmp_path)
    assert run.source == "tensorboard"
    assert [(p.step, p.value) for p in run.scalars["loss"]] == [(s, float(s)) for s in range(5)]


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 30), st.integers(1, 30)),
        min_size=1,
        max_size=4,
    )
)
def test_restarts_keep_the_latest_attempts_values(tmp_path_factory, attempts):
    """Over any sequence of attempts (resume step, steps run), each step shows its last write."""
    logdir = tmp_path_factory.mktemp("run")
    expected: dict[int, float] = {}
    for index, (resume, length) in enumerate(attempts):
        purge = resume + 1 if index else None
        with SummaryWriter(logdir, formats=("jsonl",), purge_step=purge) as writer:
            expected = {s: v for s, v in expected.items() if purge is None or s < purge}
            first = 0 if index == 0 else resume + 1
            for step in range(first, first + length):
                writer.scalar("x", float(index), step=step)
                expected[step] = float(index)
    points = read_run(logdir).scalars["x"]
    assert [(p.step, p.value) for p in points] == sorted(expected.items())


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("restart"), st.integers(0, 40)),
            st.tuples(st.just("step"), st.integers(0, 40)),
        ),
        max_size=30,
    )
)
def test_last_standing_step_matches_the_full_reader(tmp_path_factory, records):
    """The fast restart check agrees with read_run().max_step on any mix of points and marks."""
    logdir = tmp_path_factory.mktemp("run")
    lines = [
        json.dumps({"restart": n, "wall_time": 0.0})
        if kind == "restart"
        else json.dumps({"step": n, "wall_time": 0.0, "tag": "x", "value": 1.0})
        for kind, n in records
    ]
    (logdir / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
    assert last_standing_step(logdir) == read_run(logdir).max_step


def test_histograms_and_texts_from_event_files(tmp_path):
    """A run of event files alone gives its histograms and texts back, with their steps."""
    pytest.importorskip("tensorboard")
    with SummaryWriter(tmp_path, formats=("tensorboard",)) as writer:
        writer.histogram("w", [0.0, 1.0, 1.0], step=3)
        writer.text("note", "héllo", step=4)
    run = read_run(tmp_path)
    assert run.source == "tensorboard"
    (histogram,) = run.histograms["w"]
    assert (histogram.step, histogram.value["num"], histogram.value["max"]) == (3, 3, 1.0)
    assert sum(histogram.value["bucket"]) == 3
    assert [(p.step, p.value) for p in run.texts["note"]] == [(4, "héllo")]


def test_tensorflow_2_tensor_scalars_from_event_files(tmp_path):
    """Scalars that tf.summary (TF 2) writes as tensors of the scalars plugin are read."""
    pytest.importorskip("google_crc32c")
    event_pb2 = pytest.importorskip("tensorboard.compat.proto.event_pb2")
    from globalstep.summary._records import frame

    records = []
    for step, (field, number) in enumerate([("float_val", 0.5), ("double_val", 0.25)]):
        event = event_pb2.Event(step=step, wall_time=1.0)
        value = event.summary.value.add(tag="loss")
        value.metadata.plugin_data.plugin_name = "scalars"
        getattr(value.tensor, field).append(number)
        records.append(frame(event.SerializeToString()))
    empty = event_pb2.Event(step=2, wall_time=1.0)
    empty.summary.value.add(tag="loss").metadata.plugin_data.plugin_name = "scalars"
    records.append(frame(empty.SerializeToString()))  # no number: nothing to read
    (tmp_path / "events.out.tfevents.1.host").write_bytes(b"".join(records))
    assert [(p.step, p.value) for p in read_run(tmp_path).scalars["loss"]] == [(0, 0.5), (1, 0.25)]


def test_a_run_log_is_built_and_purged_through_its_public_methods():
    """RunLog.add_* append to their own series; purge drops every point at its step and
    above from each series and records the mark; max_step follows."""
    from globalstep.summary import Point, RunLog

    run = RunLog(name=".", source="jsonl")
    for step in (1, 2, 3):
        run.add_scalar("loss", Point(step, 0.0, 1.0 / step))
    run.add_histogram("w", Point(2, 0.0, {"num": 1}))
    run.add_text("note", Point(3, 0.0, "three"))
    assert [p.step for p in run.scalars["loss"]] == [1, 2, 3]
    assert run.max_step == 3
    run.purge(2)
    assert [p.step for p in run.scalars["loss"]] == [1]
    assert run.histograms == {"w": []}
    assert run.texts == {"note": []}
    assert run.restarts == [2]
    assert run.max_step == 1
    run.add_scalar("loss", Point(2, 0.0, 0.25))
    assert [(p.step, p.value) for p in run.scalars["loss"]] == [(1, 1.0), (2, 0.25)]
