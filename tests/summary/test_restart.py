"""Restart-safe curves: a resumed run's logs show each step once, the latest attempt's value."""

import pytest

from globalstep import Clock, ConfigError, SummaryWriter
from globalstep.summary import read_run


def _attempt(logdir, clock, last_step, value):
    """Writes `loss` = value(step) after each tick until the clock reaches last_step."""
    with SummaryWriter(logdir, clock=clock) as writer:
        if clock.step == 0:
            writer.scalar("loss", value(0))
        while clock.step < last_step:
            clock.tick()
            writer.scalar("loss", value(clock.step))
        return writer.purge_step


def _crash_and_resume(logdir):
    """Steps 0..150 by attempt 1, then a resume from the checkpoint at 110 to step 200."""
    clock = Clock()
    _attempt(logdir, clock, 150, lambda s: float(s))
    checkpoint = {**clock.state_dict(), "step": 110, "step_in_epoch": 110}
    resumed = Clock()
    resumed.load_state_dict(checkpoint)
    return _attempt(logdir, resumed, 200, lambda s: -float(s))


def test_tensorboard_drops_the_crashed_attempts_points(tmp_path):
    """EventAccumulator shows 0..200 once each, the second attempt's values above 110."""
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    purge_step = _crash_and_resume(tmp_path)
    assert purge_step == 111
    acc = ea.EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    acc.Reload()
    events = acc.Scalars("loss")
    assert [e.step for e in events] == list(range(201))
    assert [e.value for e in events] == [float(s) if s <= 110 else -float(s) for s in range(201)]


def test_reader_drops_the_crashed_attempts_points(tmp_path):
    """The JSONL reader applies the restart mark as TensorBoard does."""
    _crash_and_resume(tmp_path)
    run = read_run(tmp_path)
    assert run.source == "jsonl"
    assert run.restarts == [111]
    points = run.scalars["loss"]
    assert [p.step for p in points] == list(range(201))
    assert [p.value for p in points] == [float(s) if s <= 110 else -float(s) for s in range(201)]


def test_event_file_reader_drops_the_crashed_attempts_points(tmp_path):
    """Our event-file reader (used without JSONL) applies the session START mark too."""
    pytest.importorskip("tensorboard")
    _crash_and_resume(tmp_path)
    (tmp_path / "metrics.jsonl").unlink()
    run = read_run(tmp_path)
    assert run.source == "tensorboard"
    assert [p.step for p in run.scalars["loss"]] == list(range(201))
    assert run.scalars["loss"][-1].value == -200.0


def test_explicit_purge_step_drops_that_step_and_above(tmp_path):
    """purge_step=P voids the earlier points at P and above, as tf.summary does."""
    with SummaryWriter(tmp_path, formats=("jsonl",)) as writer:
        for step in range(10):
            writer.scalar("x", 1.0, step=step)
    with SummaryWriter(tmp_path, formats=("jsonl",), purge_step=5) as writer:
        writer.scalar("x", 2.0, step=5)
    points = read_run(tmp_path).scalars["x"]
    assert [(p.step, p.value) for p in points] == [(s, 1.0) for s in range(5)] + [(5, 2.0)]


def test_continuing_run_marks_no_restart(tmp_path):
    """A writer reopened with a clock at or past the logged steps marks no restart."""
    clock = Clock()
    assert _attempt(tmp_path, clock, 20, float) is None
    assert _attempt(tmp_path, clock, 40, float) is None
    run = read_run(tmp_path)
    assert run.restarts == []
    assert [p.step for p in run.scalars["loss"]] == list(range(41))


def test_crashed_half_line_is_skipped(tmp_path):
    """A half-written last JSONL line is skipped and the next writer starts a fresh line."""
    with SummaryWriter(tmp_path, formats=("jsonl",)) as writer:
        writer.scalar("x", 1.0, step=0)
    with open(tmp_path / "metrics.jsonl", "a") as file:
        file.write('{"step": 1, "wall_')
    with SummaryWriter(tmp_path, formats=("jsonl",)) as writer:
        writer.scalar("x", 2.0, step=1)
    run = read_run(tmp_path)
    assert [(p.step, p.value) for p in run.scalars["x"]] == [(0, 1.0), (1, 2.0)]
    assert run.skipped_lines == 1


def test_writer_opened_before_the_restore_keeps_history(tmp_path):
    """A writer opened at step 0, before the clock is restored to 110, marks the restart at
    111 on its first point: steps 0..110 stay."""
    clock = Clock()
    _attempt(tmp_path, clock, 150, float)
    resumed = Clock()
    with SummaryWriter(tmp_path, clock=resumed) as writer:
        resumed.load_state_dict({**resumed.state_dict(), "step": 110, "step_in_epoch": 110})
        for _ in range(90):
            resumed.tick()
            writer.scalar("loss", -float(resumed.step))
    assert writer.purge_step == 111
    run = read_run(tmp_path)
    assert [p.step for p in run.scalars["loss"]] == list(range(201))
    assert run.scalars["loss"][110].value == 110.0


def test_logging_before_tick_rewrites_the_restored_step(tmp_path):
    """A loop that logs at the restored step S itself (before tick) gets a mark at S."""
    clock = Clock()
    _attempt(tmp_path, clock, 150, float)
    resumed = Clock()
    resumed.load_state_dict({**clock.state_dict(), "step": 110, "step_in_epoch": 110})
    with SummaryWriter(tmp_path, clock=resumed) as writer:
        writer.scalar("loss", -110.0)
    assert writer.purge_step == 110
    points = read_run(tmp_path).scalars["loss"]
    assert [(p.step, p.value) for p in points[-2:]] == [(109, 109.0), (110, -110.0)]


def test_restart_check_reads_every_format(tmp_path):
    """Event files a batch ahead of the JSONL file (a kill between the two) still make the
    writer mark the restart, in both formats."""
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    with SummaryWriter(tmp_path, formats=("tensorboard",)) as writer:
        for step in range(1, 101):
            writer.scalar("x", 1.0, step=step)
    with open(tmp_path / "metrics.jsonl", "w") as file:
        for step in range(1, 51):
            file.write(f'{{"step": {step}, "wall_time": 0.0, "tag": "x", "value": 1.0}}\n')
    clock = Clock()
    clock.load_state_dict({**clock.state_dict(), "step": 59, "step_in_epoch": 59})
    with SummaryWriter(tmp_path, clock=clock) as writer:
        clock.tick()
        writer.scalar("x", 2.0)
    assert writer.purge_step == 60
    acc = ea.EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("x")] == list(range(1, 61))
    assert read_run(tmp_path).restarts == [60]


def test_restart_marks_a_rollback(tmp_path):
    """restart(P) in an open writer voids the points at P and above written before it."""
    with SummaryWriter(tmp_path, formats=("jsonl",)) as writer:
        for step in range(10):
            writer.scalar("x", 1.0, step=step)
        writer.restart(5)
        for step in range(5, 8):
            writer.scalar("x", 2.0, step=step)
    points = read_run(tmp_path).scalars["x"]
    assert [(p.step, p.value) for p in points] == [(s, 1.0) for s in range(5)] + [
        (s, 2.0) for s in range(5, 8)
    ]


def test_restart_refuses_a_bad_step(tmp_path):
    """restart() with a step out of range raises ConfigError naming purge_step."""
    with (
        SummaryWriter(tmp_path, formats=("jsonl",)) as writer,
        pytest.raises(ConfigError, match="`purge_step` must be >= 0"),
    ):
        writer.restart(-1)


def test_servers_python_loader_purges_at_the_first_restart(tmp_path):
    """The loader of `tensorboard --load_fast=false` (plugin_event_accumulator), which
    ignores a run's first START event, still drops the crashed attempt's points."""
    pea = pytest.importorskip("tensorboard.backend.event_processing.plugin_event_accumulator")
    _crash_and_resume(tmp_path)
    acc = pea.EventAccumulator(str(tmp_path), size_guidance={"tensors": 0})
    acc.Reload()
    steps = [e.step for e in acc.Tensors("loss")]
    assert steps == list(range(201))
