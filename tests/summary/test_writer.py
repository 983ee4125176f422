"""Tests for globalstep.summary._writer, read back with TensorBoard's own reader."""

import contextlib
import errno
import importlib.util
import json
import math
import os
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest

from globalstep import Clock, ConfigError, NonFiniteError, SummaryWriteError, SummaryWriter
from globalstep._guards import FrozenStepWarning
from globalstep.summary import StepOrderWarning, available_formats, read_run


@pytest.fixture
def writer(tmp_path):
    """A JSONL writer on tmp_path, closed after the test."""
    w = SummaryWriter(tmp_path, formats=("jsonl",))
    yield w
    w.close()


def accumulator(logdir):
    """Loads ``logdir`` with TensorBoard's EventAccumulator, keeping every point."""
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    acc = ea.EventAccumulator(
        str(logdir), size_guidance={"scalars": 0, "histograms": 0, "tensors": 0}
    )
    acc.Reload()
    return acc


def test_scalars_read_back_by_tensorboard(tmp_path):
    """EventAccumulator gets every scalar with its step, value and wall time."""
    clock = Clock()
    before = time.time()
    with SummaryWriter(tmp_path, clock=clock) as writer:
        for _ in range(300):
            clock.tick()
            writer.scalar("train/loss", 1.0 / clock.step)
    after = time.time()
    events = accumulator(tmp_path).Scalars("train/loss")
    assert [e.step for e in events] == list(range(1, 301))
    assert [e.value for e in events] == pytest.approx([1.0 / s for s in range(1, 301)])
    assert all(before <= e.wall_time <= after for e in events)
    jsonl = read_run(tmp_path).scalars["train/loss"]
    assert [p.wall_time for p in jsonl] == pytest.approx([e.wall_time for e in events])


def test_histogram_read_back_by_tensorboard(tmp_path):
    """A histogram reaches TensorBoard with its count, sum, extremes and step."""
    values = np.arange(100, dtype=np.float32)
    with SummaryWriter(tmp_path) as writer:
        writer.histogram("weights", values, step=7)
    (event,) = accumulator(tmp_path).Histograms("weights")
    h = event.histogram_value
    assert (event.step, h.num, h.min, h.max, h.sum) == (7, 100, 0.0, 99.0, 4950.0)
    assert sum(h.bucket) == 100


def test_text_read_back_by_tensorboard(tmp_path):
    """A text reaches TensorBoard's text plugin as a UTF-8 string tensor at its step."""
    with SummaryWriter(tmp_path) as writer:
        writer.text("notes", "lr warm-up done ✓", step=3)
    acc = accumulator(tmp_path)
    (event,) = acc.Tensors("notes")
    assert event.step == 3
    assert event.tensor_proto.string_val[0].decode() == "lr warm-up done ✓"
    assert acc.SummaryMetadata("notes").plugin_data.plugin_name == "text"


def test_scalars_share_step_and_wall_time(tmp_path):
    """scalars() writes every tag at one step and one wall time."""
    with SummaryWriter(tmp_path, formats=("jsonl",)) as writer:
        writer.scalars({"loss": 0.5, "lr": np.float32(0.1)}, step=4)
    run = read_run(tmp_path)
    loss, lr = run.scalars["loss"][0], run.scalars["lr"][0]
    assert (loss.step, lr.step, loss.wall_time) == (4, 4, lr.wall_time)
    assert lr.value == pytest.approx(0.1)


def test_step_comes_from_the_clock(tmp_path):
    """Without step=, each point takes the clock's step at the call."""
    clock = Clock()
    with SummaryWriter(tmp_path, clock=clock, formats=("jsonl",)) as writer:
        writer.scalar("a", 1.0)
        clock.tick(5)
        writer.scalar("a", 2.0)
    assert [p.step for p in read_run(tmp_path).scalars["a"]] == [0, 5]


def test_jsonl_needs_no_tensorboard(tmp_path):
    """A JSONL-only writer in a fresh interpreter imports neither tensorboard nor protobuf."""
    code = (
        "import sys; from globalstep import SummaryWriter\n"
        f"w = SummaryWriter({str(tmp_path)!r}, formats=('jsonl',)); w.scalar('x', 1.0, 0)\n"
        "w.close(); print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('tensorboard', 'google')))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == "[]"
    assert json.loads((tmp_path / "metrics.jsonl").read_text())["value"] == 1.0


def test_missing_tensorboard_names_the_extra(tmp_path, monkeypatch):
    """Asking for event files without the extra raises the pip install hint."""
    monkeypatch.setitem(sys.modules, "tensorboard.compat.proto.event_pb2", None)
    with pytest.raises(ImportError, match=r"pip install 'globalstep\[tensorboard\]'"):
        SummaryWriter(tmp_path, formats=("tensorboard",))


def test_interpreter_exit_flushes(tmp_path):
    """A writer never closed still writes everything when the interpreter exits."""
    code = (
        "from globalstep import SummaryWriter\n"
        f"w = SummaryWriter({str(tmp_path)!r}, flush_seconds=3600)\n"
        "for i in range(1000): w.scalar('x', float(i), step=i)\n"
        "w.histogram('h', [1.0, 2.0], step=999); w.text('t', 'last', step=999)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env)
    acc = accumulator(tmp_path)
    assert [e.value for e in acc.Scalars("x")] == [float(i) for i in range(1000)]
    assert [e.step for e in acc.Histograms("h")] == [999]
    assert [e.step for e in acc.Tensors("t")] == [999]
    run = read_run(tmp_path)
    assert [p.value for p in run.scalars["x"]] == [float(i) for i in range(1000)]
    assert [p.value for p in run.texts["t"]] == ["last"]
    assert len(run.histograms["h"]) == 1


def test_interpreter_exit_flushes_the_others_after_a_write_error(tmp_path):
    """At exit, a failed write is reported and the writers opened after it still flush."""
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    (tmp_path / "full").mkdir()
    os.symlink("/dev/full", tmp_path / "full" / "metrics.jsonl")
    code = (
        "from globalstep import SummaryWriter\n"
        f"bad = SummaryWriter({str(tmp_path / 'full')!r}, formats=('jsonl',), "
        "flush_seconds=3600)\n"
        f"root = {str(tmp_path)!r}\n"
        "good = [SummaryWriter(f'{root}/ok{i}', flush_seconds=3600) for i in range(2)]\n"
        "bad.scalar('x', 1.0, step=0)\n"
        "for w in good:\n"
        "    for i in range(100): w.scalar('x', float(i), step=i)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert "SummaryWriteError" in out.stderr
    assert "No space left on device" in out.stderr
    for i in range(2):
        assert len(read_run(tmp_path / f"ok{i}").scalars["x"]) == 100
        assert len(accumulator(tmp_path / f"ok{i}").Scalars("x")) == 100


def test_calls_only_queue_until_flush(tmp_path):
    """scalar(), histogram() and text() write nothing on the caller's thread; flush() does."""
    writer = SummaryWriter(tmp_path, flush_seconds=3600)
    sizes = {p.name: p.stat().st_size for p in tmp_path.iterdir()}
    for i in range(100):
        writer.scalar("x", float(i), step=i)
    writer.histogram("h", [1.0], step=99)
    writer.text("t", "queued", step=99)
    assert {p.name: p.stat().st_size for p in tmp_path.iterdir()} == sizes
    writer.flush()
    assert len(read_run(tmp_path).scalars["x"]) == 100
    assert len(accumulator(tmp_path).Scalars("x")) == 100
    writer.close()


def test_close_writes_everything_queued(tmp_path):
    """close() writes every queued point of every kind, past several background batches."""
    n = 50_000
    writer = SummaryWriter(tmp_path, flush_seconds=3600)
    for i in range(n):
        writer.scalar("x", float(i), step=i)
        if i % 10_000 == 0:
            writer.histogram("h", [float(i)], step=i)
            writer.text("t", f"at {i}", step=i)
    writer.close()
    acc = accumulator(tmp_path)
    assert [e.step for e in acc.Scalars("x")] == list(range(n))
    assert [e.value for e in acc.Scalars("x")] == [float(i) for i in range(n)]
    assert [e.step for e in acc.Histograms("h")] == list(range(0, n, 10_000))
    assert [e.step for e in acc.Tensors("t")] == list(range(0, n, 10_000))
    run = read_run(tmp_path)
    assert [p.step for p in run.scalars["x"]] == list(range(n))
    assert [p.value for p in run.texts["t"]] == [f"at {i}" for i in range(0, n, 10_000)]


def test_background_flush_without_close(tmp_path):
    """Queued values reach the file within flush_seconds, with no call from the caller."""
    writer = SummaryWriter(tmp_path, formats=("jsonl",), flush_seconds=0.05)
    writer.scalar("x", 1.0, step=0)
    deadline = time.monotonic() + 30
    while (tmp_path / "metrics.jsonl").stat().st_size == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert read_run(tmp_path).scalars["x"][0].value == 1.0
    writer.close()


def test_disk_full_surfaces_on_next_call(tmp_path):
    """A full disk (/dev/full) raises SummaryWriteError at the next call after the write."""
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    os.symlink("/dev/full", tmp_path / "metrics.jsonl")
    writer = SummaryWriter(tmp_path, formats=("jsonl",))
    writer.scalar("x", 1.0, step=0)
    with pytest.raises(SummaryWriteError, match="could not write") as info:
        writer.flush()
    assert isinstance(info.value.__cause__, OSError)
    assert info.value.__cause__.errno == errno.ENOSPC
    with pytest.raises(SummaryWriteError, match="could not write"):
        writer.close()


def test_background_error_is_reported_once(tmp_path):
    """A background write error raises at the next call only; the call after it is queued."""
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    os.symlink("/dev/full", tmp_path / "metrics.jsonl")
    writer = SummaryWriter(tmp_path, formats=("jsonl",))
    writer.scalar("x", 1.0, step=0)
    writer._drain()
    with pytest.raises(SummaryWriteError, match="No space left on device"):
        writer.scalar("x", 2.0, step=1)
    writer.scalar("x", 3.0, step=2)
    assert [item[4] for item in writer._queue] == [3.0]
    with pytest.raises(SummaryWriteError, match="could not write"):
        writer.close()


def test_background_write_error_surfaces_on_next_call(tmp_path):
    """A write that fails on the background thread raises at the caller's next scalar()."""
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    os.symlink("/dev/full", tmp_path / "metrics.jsonl")
    writer = SummaryWriter(tmp_path, formats=("jsonl",), flush_seconds=0.01)
    writer.scalar("x", 1.0, step=0)
    deadline = time.monotonic() + 120
    while writer._sink.error is None and time.monotonic() < deadline:
        time.sleep(0.01)
    with pytest.raises(SummaryWriteError, match="No space left on device") as info:
        writer.scalar("x", 2.0, step=1)
    assert info.value.path == str(tmp_path / "metrics.jsonl")
    with pytest.raises(SummaryWriteError, match="could not write"):
        writer.close()


def test_write_error_keeps_what_was_flushed(tmp_path):
    """After a failed background write, the points flushed before it are all still readable."""
    writer = SummaryWriter(tmp_path, formats=("jsonl", "tensorboard"))
    for i in range(100):
        writer.scalar("x", float(i), step=i)
    writer.flush()

    def full(data):
        raise OSError(errno.ENOSPC, "No space left on device")

    for backend in writer._sink.backends:
        backend._file.write = full
    writer.scalar("x", 100.0, step=100)
    with pytest.raises(SummaryWriteError, match="No space left"):
        writer.close()
    assert [p.step for p in read_run(tmp_path).scalars["x"]] == list(range(100))
    assert len(accumulator(tmp_path).Scalars("x")) == 100


def test_closed_writer_refuses_writes(tmp_path):
    """A call after close() is a ConfigError that says the writer is closed."""
    writer = SummaryWriter(tmp_path, formats=("jsonl",))
    writer.close()
    writer.close()
    with pytest.raises(ConfigError, match="must be open"):
        writer.scalar("x", 1.0, step=0)


def test_closed_clock_writer_refuses_scalars(tmp_path):
    """scalars() of a dict at the clock's step (its per-update path) on a closed writer
    is the same ConfigError, and an empty dict too."""
    clock = Clock()
    writer = SummaryWriter(tmp_path, clock=clock, formats=("jsonl",))
    writer.scalars({"x": 1.0})
    writer.close()
    for values in ({"x": 2.0}, {}):
        with pytest.raises(ConfigError, match="must be open"):
            writer.scalars(values)
    assert [p.value for p in read_run(tmp_path).scalars["x"]] == [1.0]


# --- bad input ------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["1.0", None, [1.0, 2.0], b"1", object()])
def test_non_numeric_value(writer, value):
    """A value that is not a real number is refused, naming the tag."""
    with pytest.raises(ConfigError, match=r"value of 'loss'` must be a real number"):
        writer.scalar("loss", value, step=0)


def test_numpy_and_torch_scalars_accepted(tmp_path):
    """NumPy scalars, 0-d arrays and one-element tensors are written as floats."""
    torch = pytest.importorskip("torch")
    with SummaryWriter(tmp_path, formats=("jsonl",)) as writer:
        writer.scalar("a", np.float16(0.5), step=0)
        writer.scalar("a", np.array(1.5), step=1)
        writer.scalar("a", torch.tensor(2.5), step=2)
        writer.scalar("a", 3, step=3)
    assert [p.value for p in read_run(tmp_path).scalars["a"]] == [0.5, 1.5, 2.5, 3.0]


def test_nan_in_guarded_tag_raises(tmp_path, writer):
    """NaN in `loss` (guarded by default) raises NonFiniteError with step, tag and value."""
    with pytest.raises(NonFiniteError, match="`loss` is nan at step 12") as info:
        writer.scalar("loss", float("nan"), step=12)
    assert (info.value.step, info.value.tag) == (12, "loss")
    assert math.isnan(info.value.value)
    writer.flush()
    assert "loss" not in read_run(tmp_path).scalars


def test_guard_marks_any_tag(tmp_path):
    """guard=True and guard_tags guard other tags; an unguarded inf is written as Infinity."""
    with SummaryWriter(tmp_path, formats=("jsonl",), guard_tags=("grad_norm",)) as writer:
        writer.scalar("free", float("inf"), step=0)
        with pytest.raises(NonFiniteError, match="`grad_norm` is inf"):
            writer.scalar("grad_norm", float("inf"), step=1)
        with pytest.raises(NonFiniteError, match="`acc` is -inf"):
            writer.scalar("acc", float("-inf"), step=1, guard=True)
        with pytest.raises(NonFiniteError, match="`grad_norm` is nan"):
            writer.scalars({"grad_norm": float("nan")}, step=2)
    assert read_run(tmp_path).scalars["free"][0].value == math.inf


def test_nonfinite_handler_called_instead(tmp_path):
    """With on_nonfinite, the handler gets the error and the value is still written."""
    seen = []
    with SummaryWriter(tmp_path, formats=("jsonl",), on_nonfinite=seen.append) as writer:
        writer.scalar("loss", float("nan"), step=5)
    assert [(e.tag, e.step) for e in seen] == [("loss", 5)]
    assert math.isnan(read_run(tmp_path).scalars["loss"][0].value)


@pytest.mark.parametrize(
    ("tag", "rule"),
    [
        ("", "must not be empty"),
        ("   ", "must not be empty"),
        ("a\\b", "must not contain a backslash"),
        ("a\nb", "printable characters only"),
        (3, "must be a str"),
        (["loss"], "must be a str"),
    ],
)
def test_bad_tags(writer, tag, rule):
    """Empty, blank, backslashed, multi-line and non-str tags are refused with the rule."""
    with pytest.raises(ConfigError, match=rule):
        writer.scalar(tag, 1.0, step=0)


def test_slash_and_non_ascii_tags_round_trip(tmp_path):
    """'/' groups tags and non-ASCII tags are kept as UTF-8, in both formats."""
    tags = ["train/loss", "métrique/perte", "损失"]
    with SummaryWriter(tmp_path) as writer:
        for tag in tags:
            writer.scalar(tag, 1.0, step=0)
    assert sorted(accumulator(tmp_path).Tags()["scalars"]) == sorted(tags)
    assert sorted(read_run(tmp_path).scalars) == sorted(tags)


def test_logdir_that_cannot_be_created(tmp_path):
    """A log directory under a regular file is refused, naming `logdir` and the reason."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ConfigError, match="`logdir` must be a directory that can be created"):
        SummaryWriter(blocker / "logs")


def test_logdir_that_cannot_be_written(tmp_path):
    """A log directory whose log file cannot be opened is refused, naming `logdir`."""
    (tmp_path / "metrics.jsonl").mkdir()
    with pytest.raises(ConfigError, match="`logdir` must be a directory this process can write"):
        SummaryWriter(tmp_path, formats=("jsonl",))


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"formats": ()}, "formats"),
        ({"formats": "jsonl"}, "formats"),
        ({"formats": ("csv",)}, "formats"),
        ({"formats": ("jsonl", "jsonl")}, "formats"),
        ({"flush_seconds": 0}, "flush_seconds"),
        ({"flush_seconds": float("nan")}, "flush_seconds"),
        ({"clock": "global_step"}, "clock"),
        ({"purge_step": -1}, "purge_step"),
        ({"purge_step": 2.0}, "purge_step"),
        ({"stale_threshold": 1}, "stale_threshold"),
        ({"stale_threshold": 10.0}, "stale_threshold"),
        ({"guard_tags": "loss"}, "guard_tags"),
        ({"on_nonfinite": 3}, "on_nonfinite"),
    ],
)
def test_bad_parameters(tmp_path, kwargs, parameter):
    """Each bad constructor parameter is refused, naming it."""
    with pytest.raises(ConfigError, match=f"`{parameter}`"):
        SummaryWriter(tmp_path, **kwargs)


def test_logdir_that_is_not_a_path():
    """A log directory that is not a str or path is refused, naming `logdir`."""
    with pytest.raises(ConfigError, match="`logdir` must be a path; got logdir=3"):
        SummaryWriter(3)


def test_scalars_with_one_bad_value_queue_nothing(tmp_path):
    """scalars() with one bad value raises and writes none of the mapping's values."""
    with SummaryWriter(tmp_path, formats=("jsonl",)) as writer:
        with pytest.raises(ConfigError, match="value of 'b'"):
            writer.scalars({"a": 1.0, "b": "x"}, step=0)
        with pytest.raises(NonFiniteError, match="`loss` is nan"):
            writer.scalars({"c": 1.0, "loss": float("nan")}, step=1)
        writer.scalar("d", 1.0, step=2)
    assert sorted(read_run(tmp_path).scalars) == ["d"]


def test_scalars_check_each_tag_once(writer, monkeypatch):
    """A tag already written is not checked again on the per-step path."""
    from globalstep.summary import _writer as writer_module

    checked = []
    real = writer_module.check_tag
    monkeypatch.setattr(writer_module, "check_tag", lambda t: checked.append(t) or real(t))
    for step in range(3):
        writer.scalars({"a": 1.0, "b": np.float32(2.0)}, step=step)
        writer.scalar("c", 3.0, step=step)
    assert checked == ["a", "b", "c"]


def test_scalars_guard_infinities(writer):
    """scalars() refuses an infinite value in a guarded tag, as scalar() does."""
    with pytest.raises(NonFiniteError, match="`loss` is -inf"):
        writer.scalars({"loss": -math.inf}, step=0)
    writer.scalars({"other": math.inf}, step=0)


@pytest.mark.parametrize("step", [-1, 1.5, "3", True])
def test_bad_steps(writer, step):
    """A step that is negative or not an int is refused."""
    with pytest.raises(ConfigError, match="`step` must be"):
        writer.scalar("x", 1.0, step=step)


def test_no_clock_no_step(writer):
    """Without a clock, a call without step= says to pass one."""
    with pytest.raises(ConfigError, match="must be given when the writer has no clock"):
        writer.scalar("x", 1.0)


@pytest.mark.parametrize(
    ("method", "args", "rule"),
    [
        ("histogram", ("h", ["a", "b"]), "must be an array of numbers"),
        ("histogram", ("h", [1.0, float("nan")]), "must all be finite"),
        ("text", ("t", 3), "`text` must be a str"),
        ("scalars", ([("a", 1.0)],), "`values` must be a mapping"),
    ],
)
def test_bad_histogram_text_and_mapping(writer, method, args, rule):
    """Histogram values must be finite numbers, a text a str, scalars() a mapping."""
    with pytest.raises(ConfigError, match=rule):
        getattr(writer, method)(*args, step=0)


# --- step order and frozen steps ------------------------------------------------------


def _write_many(writer, count, steps=None):
    """Writes `count` scalars at the given steps (default: the clock's)."""
    for i in range(count):
        writer.scalar("loss", 1.0, step=None if steps is None else steps[i])


def test_frozen_step_warns_once_naming_the_clock(tmp_path):
    """Many writes at one unchanged clock step warn once, naming the clock."""
    clock = Clock("critic")
    writer = SummaryWriter(tmp_path, clock=clock, formats=("jsonl",), stale_threshold=50)
    with pytest.warns(FrozenStepWarning, match="clock 'critic'") as record:
        _write_many(writer, 200)
    assert "SummaryWriter was written to 50 times at step 0" in str(record[0].message)
    assert "every point lands on that one step" in str(record[0].message)
    writer.close()
    assert len(record) == 1
    assert record[0].filename == __file__


def _call_many(method, count, *args):
    """Calls method(*args) count times."""
    for _ in range(count):
        method(*args)


@pytest.mark.parametrize("method", ["scalar", "histogram", "text"])
def test_frozen_step_warns_for_each_kind(tmp_path, method):
    """Scalars, histograms and texts repeated at one unchanged step warn at the caller's line."""
    clock = Clock("critic")
    payload = {"scalar": 1.0, "histogram": [1.0], "text": "x"}[method]
    writer = SummaryWriter(tmp_path, clock=clock, formats=("jsonl",), stale_threshold=5)
    with pytest.warns(FrozenStepWarning, match="clock 'critic'") as record:
        _call_many(getattr(writer, method), 5, "t", payload)
    writer.close()
    assert record[0].filename == __file__


def test_frozen_step_warns_for_scalars_mappings(tmp_path):
    """scalars() calls repeated at one unchanged step warn, naming the clock."""
    clock = Clock("critic")
    writer = SummaryWriter(tmp_path, clock=clock, formats=("jsonl",), stale_threshold=5)
    with pytest.warns(FrozenStepWarning, match="clock 'critic'") as record:
        _call_many(writer.scalars, 5, {"a": 1.0, "b": 2.0})
    writer.close()
    assert record[0].filename == __file__


def test_many_tags_at_one_step_do_not_warn(tmp_path):
    """Many distinct tags at one step (per-layer statistics) are not a frozen step."""
    clock = Clock()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with SummaryWriter(tmp_path, clock=clock, formats=("jsonl",), stale_threshold=5) as w:
            for _ in range(3):
                for layer in range(100):
                    w.scalar(f"grad_norm/{layer}", 1.0)
                    w.histogram(f"weights/{layer}", [1.0])
                    w.text(f"note/{layer}", "x")
                    w.scalars({f"a/{layer}": 1.0, f"b/{layer}": 2.0})
                clock.tick()


def test_step_going_back_warns_with_the_fix(writer):
    """A lower step without a restart mark warns once and says how to fix it."""
    writer.scalar("x", 1.0, step=10)
    with pytest.warns(StepOrderWarning, match="purge_step=") as record:
        _write_many(writer, 2, steps=[5, 4])
    assert len(record) == 1
    assert record[0].filename == __file__


def test_advancing_steps_do_not_warn(tmp_path):
    """Several tags per step over advancing steps never warn."""
    clock = Clock()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with SummaryWriter(tmp_path, clock=clock, formats=("jsonl",), stale_threshold=5) as w:
            for _ in range(100):
                w.scalars({"a": 1.0, "b": 2.0, "c": 3.0})
                w.scalar("d", 4.0)
                clock.tick()


def test_histogram_and_text_wall_times(tmp_path):
    """Histograms and texts carry the wall time of their call in both formats."""
    before = time.time()
    with SummaryWriter(tmp_path) as writer:
        writer.histogram("h", [1.0, 2.0], step=1)
        writer.text("t", "hi", step=1)
    after = time.time()
    acc = accumulator(tmp_path)
    run = read_run(tmp_path)
    assert before <= acc.Histograms("h")[0].wall_time <= after
    assert before <= acc.Tensors("t")[0].wall_time <= after
    assert run.histograms["h"][0].wall_time == pytest.approx(acc.Histograms("h")[0].wall_time)
    assert run.texts["t"][0].wall_time == pytest.approx(acc.Tensors("t")[0].wall_time)


def test_queue_bound_writes_on_the_callers_thread(tmp_path, monkeypatch):
    """When the queue passes its bound, the caller writes it itself instead of growing it."""
    monkeypatch.setattr("globalstep.summary._writer._BATCH_ITEMS", 5)
    monkeypatch.setattr("globalstep.summary._queue.MAX_QUEUED", 10)
    writer = SummaryWriter(tmp_path, formats=("jsonl",), flush_seconds=3600)
    real_wake = writer._sink.wake

    class Deaf:
        """An event whose set() the sleeping background thread never hears."""

        def set(self):
            pass

    writer._sink.wake = Deaf()
    for i in range(10):
        writer.scalar("x", float(i), step=i)
    written = len(read_run(tmp_path).scalars["x"])
    writer._sink.wake = real_wake
    writer.close()
    assert written == 10


def test_numpy_integer_steps_accepted(writer, tmp_path):
    """A NumPy integer step is taken as an int."""
    writer.scalar("x", 1.0, step=np.int64(7))
    writer.flush()
    assert read_run(tmp_path).scalars["x"][0].step == 7


def test_available_formats_with_the_extra():
    """With tensorboard and google-crc32c installed, both formats are available."""
    pytest.importorskip("tensorboard")
    pytest.importorskip("google_crc32c")
    assert available_formats() == ("tensorboard", "jsonl")


def test_available_formats_on_the_core_install(monkeypatch):
    """Without the tensorboard extra, only JSONL is available."""
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "google_crc32c" else real_find_spec(name, *a),
    )
    assert available_formats() == ("jsonl",)


def test_empty_histogram_is_written_with_no_buckets(tmp_path):
    """An empty array is a histogram of 0 values, not an error."""
    with SummaryWriter(tmp_path, formats=("jsonl",)) as writer:
        writer.histogram("w", [], step=0)
    (point,) = read_run(tmp_path).histograms["w"]
    assert (point.value["num"], point.value["bucket"]) == (0, [])


def test_repr_names_the_directory_and_clock(tmp_path):
    """repr() shows the log directory and the clock's name."""
    with SummaryWriter(tmp_path, clock=Clock("critic"), formats=("jsonl",)) as writer:
        assert repr(writer) == f"SummaryWriter({str(tmp_path)!r}, clock='critic')"


def test_error_in_the_with_body_is_the_one_raised(tmp_path, monkeypatch):
    """A with-body's error propagates even when closing then fails to write."""
    from globalstep.summary._jsonl import JsonlBackend

    def disk_full(self, items):
        raise OSError(errno.ENOSPC, "No space left on device")

    def train() -> None:
        with SummaryWriter(tmp_path, formats=("jsonl",)) as writer:
            writer.scalar("x", 1.0, step=0)
            raise KeyError("body")

    monkeypatch.setattr(JsonlBackend, "write", disk_full)
    with pytest.raises(KeyError, match="body"):
        train()


def test_a_backend_that_fails_to_open_closes_the_others(tmp_path, monkeypatch):
    """If the event file cannot be opened, the JSONL file opened before it is closed."""
    pytest.importorskip("tensorboard")
    from globalstep.summary import _jsonl, _tensorboard

    closed = []
    real_close = _jsonl.JsonlBackend.close
    monkeypatch.setattr(
        _jsonl.JsonlBackend, "close", lambda self: closed.append(self.path) or real_close(self)
    )

    def no_space(*args):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_tensorboard.TensorBoardBackend, "__init__", no_space)
    with pytest.raises(ConfigError, match="`logdir` must be a directory this process can write"):
        SummaryWriter(tmp_path, formats=("jsonl", "tensorboard"))
    assert closed == [str(tmp_path / "metrics.jsonl")]


def test_unreadable_event_files_skip_the_restart_check(tmp_path, monkeypatch):
    """Without the tensorboard extra, a JSONL writer opens beside old event files, unmarked."""
    pytest.importorskip("tensorboard")
    with SummaryWriter(tmp_path, formats=("tensorboard",)) as writer:
        writer.scalar("x", 1.0, step=50)
    monkeypatch.setitem(sys.modules, "tensorboard.compat.proto.event_pb2", None)
    with SummaryWriter(tmp_path, clock=Clock(), formats=("jsonl",)) as writer:
        assert writer.purge_step is None
        writer.scalar("x", 2.0)


def test_a_restart_mark_that_cannot_be_written_closes_the_files(tmp_path, monkeypatch):
    """If marking the restart fails (disk full), the writer's files are closed and the
    error names the directory."""
    from globalstep.summary import _jsonl

    closed = []
    real_close = _jsonl.JsonlBackend.close
    monkeypatch.setattr(
        _jsonl.JsonlBackend, "close", lambda self: closed.append(self.path) or real_close(self)
    )

    def disk_full(self, purge_step, wall_time):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_jsonl.JsonlBackend, "mark_restart", disk_full)
    with pytest.raises(ConfigError, match="No space left on device"):
        SummaryWriter(tmp_path, formats=("jsonl",), purge_step=5)
    assert closed == [str(tmp_path / "metrics.jsonl")]


# --- a writer no bad call can break ------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "rule"),
    [
        (lambda w: w.scalar("x", 1.0, step=2**63), r"`step` must be <= 2\*\*63-1"),
        (lambda w: w.scalar("x", 1.0, step=np.uint64(2**64 - 1)), r"`step` must be <= 2\*\*63-1"),
        (lambda w: w.scalar("x", 10**400, step=1), r"must fit a float64.*401 digits"),
        (lambda w: w.scalar("x", 1e39, step=1), r"must fit TensorBoard's float32"),
        (lambda w: w.scalars({"x": 1.0, "y": -1e300}, step=1), r"value of 'y'` must fit"),
        (lambda w: w.scalar("x", np.ones((1, 2)), step=1), r"exactly one element"),
        (lambda w: w.scalar("x", np.complex128(1j), step=1), r"must be a real number"),
        (lambda w: w.histogram("x", [1.0], step=-3), r"`step` must be >= 0"),
        (lambda w: w.text("x", "t", step=2**64), r"`step` must be <= 2\*\*63-1"),
    ],
)
def test_writer_poison(tmp_path, call, rule):
    """A bad call between good ones raises ConfigError; every good call is readable after,
    in TensorBoard's reader and in `globalstep logs`."""
    writer = SummaryWriter(tmp_path, formats=("jsonl", "tensorboard"))
    writer.scalar("x", 1.0, step=0)
    with pytest.raises(ConfigError, match=rule):
        call(writer)
    writer.scalar("x", 2.0, step=1)
    writer.scalars({"x": 3.0}, step=2)
    writer.close()
    assert [(p.step, p.value) for p in read_run(tmp_path).scalars["x"]] == [
        (0, 1.0),
        (1, 2.0),
        (2, 3.0),
    ]
    assert [(e.step, e.value) for e in accumulator(tmp_path).Scalars("x")] == [
        (0, 1.0),
        (1, 2.0),
        (2, 3.0),
    ]
    out = subprocess.run(
        [sys.executable, "-m", "globalstep", "logs", str(tmp_path)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.splitlines()[2].split() == ["x", "3", "0", "2", "3", "1", "3"]


def test_large_values_fit_jsonl_only(tmp_path):
    """Without event files a value beyond float32 is written as it is."""
    with SummaryWriter(tmp_path, formats=("jsonl",)) as writer:
        writer.scalar("x", 1e300, step=0)
        writer.scalar("y", math.inf, step=0)
    assert read_run(tmp_path).scalars["x"][0].value == 1e300


@pytest.mark.parametrize("shape", [(), (1,), (1, 1), (1, 1, 1)])
def test_one_element_arrays_of_any_shape(writer, tmp_path, shape):
    """A NumPy array of one element is one number whatever its shape."""
    writer.scalar("x", np.full(shape, 0.25, dtype=np.float32), step=0)
    writer.flush()
    assert read_run(tmp_path).scalars["x"][0].value == 0.25


def test_one_element_tensors_of_any_shape(writer, tmp_path):
    """A torch tensor of one element is one number whatever its shape."""
    torch = pytest.importorskip("torch")
    for step, shape in enumerate([(), (1,), (1, 1)]):
        writer.scalar("x", torch.full(shape, 0.5), step=step)
    writer.flush()
    assert [p.value for p in read_run(tmp_path).scalars["x"]] == [0.5, 0.5, 0.5]


def test_sync_puts_the_points_on_disk(tmp_path):
    """sync() writes what is queued, with a long flush period, and calls fsync on each file."""
    synced = []
    real = os.fsync
    writer = SummaryWriter(tmp_path, formats=("jsonl", "tensorboard"), flush_seconds=3600)
    writer.scalar("x", 1.0, step=0)
    try:
        os.fsync = lambda fd: synced.append(fd) or real(fd)
        writer.sync()
    finally:
        os.fsync = real
    assert len(synced) == 3  # two files and, the first time, the directory
    assert [p.step for p in read_run(tmp_path).scalars["x"]] == [0]
    writer.close()


def test_tensor_values_are_read_off_the_training_thread(tmp_path):
    """A one-element tensor is queued as it is (no read on the caller's thread) and written
    as its value."""
    torch = pytest.importorskip("torch")
    writer = SummaryWriter(tmp_path, formats=("jsonl",), flush_seconds=3600)
    loss = torch.tensor([0.25])
    writer.scalars({"loss": loss, "lr": 0.1}, step=1)
    assert writer._queue[0][4]["loss"] is loss  # queued in a group of this step's scalars
    writer.close()
    assert read_run(tmp_path).scalars["loss"][0].value == 0.25


def test_guarded_nan_tensor_raises_at_the_next_call(tmp_path):
    """A NaN tensor under a guard raises NonFiniteError at the call after it was read
    (that call is not queued); the writer goes on."""
    torch = pytest.importorskip("torch")
    writer = SummaryWriter(tmp_path, formats=("jsonl",), flush_seconds=3600)
    writer.scalar("loss", torch.tensor(float("nan")), step=3)
    writer._drain()
    with pytest.raises(NonFiniteError, match="`loss` is nan at step 3"):
        writer.scalar("loss", 1.0, step=4)
    writer.scalar("loss", 1.0, step=5)
    writer.close()
    assert [p.step for p in read_run(tmp_path).scalars["loss"]] == [3, 5]


def test_guarded_nan_tensor_in_a_group_raises_at_the_next_call(tmp_path):
    """A guarded NaN tensor in a scalars() call is written with the call's other values,
    and NonFiniteError is raised at the next call."""
    torch = pytest.importorskip("torch")
    writer = SummaryWriter(tmp_path, formats=("jsonl",), flush_seconds=3600)
    writer.scalars({"lr": 0.1, "loss": torch.tensor(float("nan")), "acc": 0.5}, step=3)
    writer._drain()
    with pytest.raises(NonFiniteError, match="`loss` is nan at step 3"):
        writer.scalars({"lr": 0.2}, step=4)
    writer.close()
    run = read_run(tmp_path)
    assert math.isnan(run.scalars["loss"][0].value)
    assert [(p.step, p.value) for p in run.scalars["lr"]] == [(3, 0.1)]
    assert [p.value for p in run.scalars["acc"]] == [0.5]


def test_tensor_of_two_elements_is_refused_at_once(writer):
    """A tensor of more than one element raises ConfigError on the caller's thread."""
    torch = pytest.importorskip("torch")
    with pytest.raises(ConfigError, match="exactly one element"):
        writer.scalar("loss", torch.ones(2), step=0)


def test_first_tensor_of_a_tag_in_scalars_is_checked_at_once(writer):
    """scalars() refuses a first tensor of two elements under a tag on the caller's thread."""
    torch = pytest.importorskip("torch")
    with pytest.raises(ConfigError, match="exactly one element"):
        writer.scalars({"loss": torch.ones(2)}, step=0)


def test_later_bad_tensor_of_a_tag_raises_at_the_next_call(tmp_path):
    """A later tensor of two elements under a checked tag is refused when read: the next
    call raises ConfigError, its point is not written, and the writer goes on."""
    torch = pytest.importorskip("torch")
    writer = SummaryWriter(tmp_path, formats=("jsonl",), flush_seconds=3600)
    writer.scalars({"loss": torch.tensor(0.5)}, step=1)
    writer.scalars({"loss": torch.ones(2)}, step=2)
    writer._drain()
    with pytest.raises(ConfigError, match=r"exactly one element.*read after the call returned"):
        writer.scalars({"loss": torch.tensor(0.25)}, step=3)
    writer.scalars({"loss": torch.tensor(0.125)}, step=4)
    writer.close()
    assert [(p.step, p.value) for p in read_run(tmp_path).scalars["loss"]] == [(1, 0.5), (4, 0.125)]


def test_later_bad_tensor_in_a_group_drops_only_its_point(tmp_path):
    """A later tensor of two elements in a scalars() call is not written; the call's other
    values are, and the next call raises ConfigError."""
    torch = pytest.importorskip("torch")
    writer = SummaryWriter(tmp_path, formats=("jsonl",), flush_seconds=3600)
    writer.scalars({"loss": torch.tensor(0.5), "lr": 0.1, "acc": torch.tensor(0.5)}, step=1)
    writer.scalars({"lr": 0.2, "loss": torch.ones(2), "acc": torch.tensor(0.75)}, step=2)
    writer._drain()
    with pytest.raises(ConfigError, match="exactly one element"):
        writer.scalars({"loss": torch.tensor(0.25)}, step=3)
    writer.close()
    run = read_run(tmp_path)
    assert [(p.step, p.value) for p in run.scalars["loss"]] == [(1, 0.5)]
    assert [(p.step, p.value) for p in run.scalars["lr"]] == [(1, 0.1), (2, 0.2)]
    assert [(p.step, p.value) for p in run.scalars["acc"]] == [(1, 0.5), (2, 0.75)]


def test_failed_write_counts_the_points_of_each_group(tmp_path):
    """A failed write reports the number of points it lost, each scalar of a group counted."""
    writer = SummaryWriter(tmp_path, formats=("jsonl",), flush_seconds=3600)

    def full(data):
        raise OSError(errno.ENOSPC, "No space left on device")

    writer._sink.backends[0]._file.write = full
    writer.scalars({"a": 1.0, "b": 2.0, "c": 3.0}, step=1)
    writer.scalar("a", 4.0, step=2)
    writer._drain()
    with pytest.raises(SummaryWriteError, match="4 points were lost"):
        writer.scalar("a", 5.0, step=3)
    writer.close()


def test_later_complex_tensor_of_a_tag_raises_at_the_next_call(tmp_path):
    """A later complex tensor under a checked tag raises ConfigError at the next call."""
    torch = pytest.importorskip("torch")
    writer = SummaryWriter(tmp_path, formats=("jsonl",), flush_seconds=3600)
    writer.scalars({"loss": torch.tensor(0.5)}, step=1)
    writer.scalars({"loss": torch.tensor(1 + 2j)}, step=2)
    writer._drain()
    with pytest.raises(ConfigError, match="must be a real number"):
        writer.scalars({"loss": torch.tensor(0.25)}, step=3)
    writer.close()


def test_many_tags_in_one_call_keep_their_order(tmp_path):
    """A call of more tags than one queued group holds writes each of them, in order."""
    writer = SummaryWriter(tmp_path, formats=("jsonl",), flush_seconds=3600)
    values = {f"t{i:02d}": float(i) for i in range(40)}
    writer.scalars(values, step=7)
    writer.scalars({"a": 1.0, "b": 2.0}, step=8)
    writer.close()
    run = read_run(tmp_path)
    assert [run.scalars[tag][0].value for tag in values] == list(values.values())
    assert [run.scalars[tag][0].step for tag in ("a", "b")] == [8, 8]


def test_scalars_copies_the_mapping(tmp_path):
    """A mapping changed after scalars() returns is written as it was at the call."""
    writer = SummaryWriter(tmp_path, formats=("jsonl",), flush_seconds=3600)
    values = {"x": 1.0}
    writer.scalars(values, step=0)
    values["x"] = 2.0
    writer.close()
    assert read_run(tmp_path).scalars["x"][0].value == 1.0


def test_sync_points_from_another_thread_puts_the_points_on_disk(tmp_path):
    """sync_points() called on another thread writes the queued points and fsyncs them."""
    synced = []
    real = os.fsync
    writer = SummaryWriter(tmp_path, formats=("jsonl",), flush_seconds=3600)
    writer.scalars({"x": 1.0, "y": 2.0}, step=3)
    try:
        os.fsync = lambda fd: synced.append(fd) or real(fd)
        thread = threading.Thread(target=writer.sync_points)
        thread.start()
        thread.join()
    finally:
        os.fsync = real
    assert synced
    assert [p.step for p in read_run(tmp_path).scalars["y"]] == [3]
    writer.close()


def test_sync_points_raises_a_pending_error_and_leaves_it_for_the_next_call(tmp_path):
    """sync_points() raises a guarded NaN tensor read in the background; the training
    thread's next call raises it too."""
    torch = pytest.importorskip("torch")
    writer = SummaryWriter(tmp_path, formats=("jsonl",), flush_seconds=3600)
    writer.scalars({"loss": torch.tensor(0.5)}, step=1)
    writer.scalars({"loss": torch.tensor(float("nan"))}, step=2)
    with pytest.raises(NonFiniteError, match="`loss` is nan at step 2"):
        writer.sync_points()
    with pytest.raises(NonFiniteError, match="`loss` is nan at step 2"):
        writer.scalars({"loss": 1.0}, step=3)
    writer.close()


def test_sync_points_on_a_closed_writer_does_nothing(tmp_path):
    """sync_points() after close() returns without error."""
    writer = SummaryWriter(tmp_path, formats=("jsonl",))
    writer.scalar("x", 1.0, step=0)
    writer.close()
    writer.sync_points()
    assert [p.step for p in read_run(tmp_path).scalars["x"]] == [0]


def test_scalars_of_an_empty_mapping_writes_nothing(tmp_path):
    """scalars({}) queues nothing and marks no step."""
    writer = SummaryWriter(tmp_path, formats=("jsonl",), flush_seconds=3600)
    writer.scalars({}, step=5)
    writer.scalars({"x": 1.0}, step=2)
    writer.close()
    assert [p.step for p in read_run(tmp_path).scalars["x"]] == [2]


@pytest.fixture
def together_on_cpu(monkeypatch):
    """Reads CPU tensors together too, as tensors on an accelerator are (no GPU here)."""
    from globalstep.summary import _values

    monkeypatch.setattr(_values, "TOGETHER_ON_CPU", True)


def test_cpu_tensors_are_read_one_by_one(tmp_path, monkeypatch):
    """Tensors on the CPU are read with item() (a plain read there; a stack costs more),
    and the writer does not look for tensors to read together."""
    torch = pytest.importorskip("torch")
    from globalstep.summary import _values

    looked = []
    monkeypatch.setattr(_values, "read_together", lambda items, limit: looked.append(1) or False)
    writer = SummaryWriter(tmp_path, formats=("jsonl",), flush_seconds=3600)
    for step in range(20):
        writer.scalars({"loss": torch.tensor(step / 8)}, step=step)
    writer.close()
    assert not writer._sink.on_device
    assert looked == []
    assert [p.value for p in read_run(tmp_path).scalars["loss"]] == [s / 8 for s in range(20)]


def test_a_tensor_on_a_device_turns_reading_together_on(tmp_path):
    """The first tensor of a tag that is not on the CPU (here on the meta device) makes
    the writer read its batches' device tensors together."""
    torch = pytest.importorskip("torch")
    writer = SummaryWriter(tmp_path, formats=("jsonl",), flush_seconds=3600)
    writer.scalars({"cpu": torch.tensor(0.5)}, step=0)
    assert not writer._sink.on_device
    writer.scalars({"meta": torch.tensor(0.5, device="meta")}, step=1)
    assert writer._sink.on_device
    single = SummaryWriter(tmp_path / "single", formats=("jsonl",), flush_seconds=3600)
    single.scalar("meta", torch.tensor(0.5, device="meta"), step=0)  # scalar() looks too
    assert single._sink.on_device
    single._queue.clear()
    single.close()
    writer._queue.clear()  # a meta tensor has no value to write
    writer.close()


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16", "int64", "bool"])
def test_tensors_read_together_give_what_item_gives(tmp_path, monkeypatch, together_on_cpu, dtype):
    """Many 0-d tensors of one dtype are read in one stack, and the files hold what
    reading each with item() writes, in both formats (refusals included)."""
    torch = pytest.importorskip("torch")
    from globalstep.summary import _values

    generator = torch.Generator().manual_seed(0)
    values = torch.randn(40, generator=generator, dtype=torch.float64) * 1e3
    tensors = [v.to(getattr(torch, dtype)) for v in values]

    def write(directory):
        writer = SummaryWriter(directory, flush_seconds=3600)
        for step, tensor in enumerate(tensors):
            writer.scalars({"x": tensor, "lr": 0.1}, step=step)
        writer.scalar("one", tensors[0], step=40)  # a single scalar, read in the same stack
        with contextlib.suppress(ConfigError):
            writer.close()
        return read_run(directory), accumulator(directory)

    stacks = []
    real_stack = torch.stack
    monkeypatch.setattr(torch, "stack", lambda ts: stacks.append(len(ts)) or real_stack(ts))
    together, together_events = write(tmp_path / "together")
    assert stacks == [41]
    monkeypatch.setattr(_values, "read_together", lambda items, limit: False)
    alone, alone_events = write(tmp_path / "alone")
    assert stacks == [41]
    for tag in ("x", "one"):
        got = [(p.step, p.value) for p in together.scalars.get(tag, [])]
        assert got == [(p.step, p.value) for p in alone.scalars.get(tag, [])]
        if dtype != "bool":
            assert len(got) == (40 if tag == "x" else 1)
            assert [(e.step, e.value) for e in together_events.Scalars(tag)] == [
                (e.step, e.value) for e in alone_events.Scalars(tag)
            ]


def test_tensors_read_together_keep_the_guards(tmp_path, together_on_cpu):
    """A guarded NaN among tensors read together raises at the next call, naming its step;
    the other points are written."""
    torch = pytest.importorskip("torch")
    writer = SummaryWriter(tmp_path, formats=("jsonl",), flush_seconds=3600)
    for step in range(20):
        value = float("nan") if step == 13 else step / 4
        writer.scalars({"loss": torch.tensor(value, requires_grad=True) * 1}, step=step)
    writer._drain()
    with pytest.raises(NonFiniteError, match="`loss` is nan at step 13"):
        writer.scalars({"loss": 1.0}, step=20)
    writer.close()
    points = read_run(tmp_path).scalars["loss"]
    assert [p.step for p in points] == list(range(20))
    assert [p.value for p in points if p.step != 13] == [s / 4 for s in range(20) if s != 13]


def test_tensors_not_read_together_fall_back_to_item(tmp_path, together_on_cpu):
    """Fewer tensors than a stack is worth, shapes other than 0-d, and a failed stack are
    read one by one: the same numbers."""
    torch = pytest.importorskip("torch")
    from globalstep.summary import _values

    writer = SummaryWriter(tmp_path, formats=("jsonl",), flush_seconds=3600)
    for step in range(3):
        writer.scalars({"few": torch.tensor(step + 0.5)}, step=step)
    for step in range(3, 15):
        writer.scalars({"shaped": torch.full((1,), step + 0.25)}, step=step)
    writer._drain()
    for step in range(15, 27):
        writer.scalars({"failed": torch.tensor(step * 2.0)}, step=step)
    real_stack = torch.stack

    def failing_stack(*args, **kwargs):
        raise RuntimeError("no stack here")

    torch.stack = failing_stack
    try:
        assert _values.read_together(list(writer._queue), math.inf) is False
        writer.close()
    finally:
        torch.stack = real_stack
    run = read_run(tmp_path)
    assert [p.value for p in run.scalars["few"]] == [0.5, 1.5, 2.5]
    assert [p.value for p in run.scalars["shaped"]] == [s + 0.25 for s in range(3, 15)]
    assert [p.value for p in run.scalars["failed"]] == [s * 2.0 for s in range(15, 27)]
