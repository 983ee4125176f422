"""Tests for globalstep.summary._progress: the throughput meter and the progress display."""

import io

import pytest

from globalstep import Clock, ConfigError, SummaryWriter
from globalstep.summary import ProgressDisplay, ThroughputMeter, read_run
from globalstep.summary._progress import format_seconds


class FakeTime:
    """A settable monotonic clock."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_meter_rates_from_clock_deltas():
    """Steps, samples and tokens per second come from the clock's counters over time."""
    time_fn = FakeTime()
    clock = Clock(batch_size=8, tokens_per_step=1024)
    meter = ThroughputMeter(clock, time_fn=time_fn)
    clock.tick(20)
    time_fn.now = 4.0
    reading = meter.read()
    assert (reading.steps_per_second, reading.samples_per_second) == (5.0, 40.0)
    assert reading.tokens_per_second == 5120.0
    clock.tick(10)
    time_fn.now = 5.0
    assert meter.read().steps_per_second == 10.0


def test_meter_without_elapsed_time_reads_none():
    """A reading with no time passed since the last one is None, not a division by zero."""
    clock = Clock()
    meter = ThroughputMeter(clock, time_fn=lambda: 1.0)
    clock.tick()
    assert meter.read() is None


def test_meter_writes_stepcounterhook_tags(tmp_path):
    """write() logs global_step/sec (TensorFlow's tag) and samples/sec at the clock's step."""
    time_fn = FakeTime()
    clock = Clock(batch_size=4)
    meter = ThroughputMeter(clock, time_fn=time_fn)
    with SummaryWriter(tmp_path, clock=clock, formats=("jsonl",)) as writer:
        clock.tick(50)
        time_fn.now = 2.0
        meter.write(writer)
    run = read_run(tmp_path)
    assert run.scalars["global_step/sec"][0].value == 25.0
    assert run.scalars["samples/sec"][0].value == 100.0
    assert run.scalars["samples/sec"][0].step == 50
    assert "tokens/sec" not in run.scalars


def test_meter_writes_tokens_per_second(tmp_path):
    """A clock that counts tokens gets tokens/sec, under the clock's own name for steps."""
    time_fn = FakeTime()
    clock = Clock("critic", tokens_per_step=1000)
    meter = ThroughputMeter(clock, time_fn=time_fn)
    with SummaryWriter(tmp_path, clock=clock, formats=("jsonl",)) as writer:
        clock.tick(10)
        time_fn.now = 4.0
        meter.write(writer)
    scalars = read_run(tmp_path).scalars
    assert sorted(scalars) == ["critic/sec", "tokens/sec"]
    assert scalars["tokens/sec"][0].value == 2500.0


def test_plain_lines_when_not_a_terminal():
    """A non-terminal stream gets one line every N steps with step/total, epoch, rate, ETA."""
    time_fn = FakeTime()
    clock = Clock(steps_per_epoch=10)
    out = io.StringIO()
    display = ProgressDisplay(clock, 100, every_n_steps=25, stream=out, time_fn=time_fn)
    for _ in range(100):
        clock.tick()
        time_fn.now += 0.5
        display.update(loss=0.25)
    lines = out.getvalue().splitlines()
    assert len(lines) == 4
    assert lines[0] == "step 25/100 (25%)  epoch 2  2 steps/s  ETA 38s  loss 0.25"
    assert lines[-1].startswith("step 100/100 (100%)  epoch 10")


def test_plain_lines_without_total():
    """Without total_steps the line has no percentage and no ETA."""
    clock = Clock()
    out = io.StringIO()
    display = ProgressDisplay(clock, every_n_steps=1, stream=out, time_fn=FakeTime())
    clock.tick()
    display.update(lr=0.1)
    assert out.getvalue() == "step 1  lr 0.1\n"


def test_no_epoch_where_the_clock_counts_none():
    """A clock without steps_per_epoch shows no epoch (not "epoch 0" for the whole run);
    one whose loop ends epochs shows them from the first end_epoch() on."""
    clock = Clock()
    time_fn = FakeTime()
    out = io.StringIO()
    display = ProgressDisplay(clock, 300, every_n_steps=100, stream=out, time_fn=time_fn)
    for step in range(1, 301):
        clock.tick()
        time_fn.now += 1.0
        display.update(loss=0.5)
        if step == 200:
            clock.end_epoch()
    lines = out.getvalue().splitlines()
    assert [line.split("  ")[:2] for line in lines] == [
        ["step 100/300 (33%)", "1 steps/s"],
        ["step 200/300 (66%)", "1 steps/s"],
        ["step 300/300 (100%)", "epoch 1"],
    ]


def test_live_bar_with_rich():
    """live=True draws rich's bar and shows the step and the chosen scalars."""
    pytest.importorskip("rich")
    time_fn = FakeTime()
    clock = Clock()
    out = io.StringIO()
    with ProgressDisplay(clock, 10, stream=out, live=True, time_fn=time_fn) as display:
        for _ in range(10):
            clock.tick()
            time_fn.now += 1.0
            display.update(loss=0.5)
    text = out.getvalue()
    assert "step 10/10" in text
    assert "loss 0.5" in text


def test_live_bar_keeps_plain_lines_above_it():
    """With a live bar, the every-N-steps lines are still printed, above the bar."""
    pytest.importorskip("rich")
    time_fn = FakeTime()
    clock = Clock()
    out = io.StringIO()
    with ProgressDisplay(
        clock, 10, every_n_steps=5, stream=out, live=True, time_fn=time_fn
    ) as display:
        for _ in range(10):
            clock.tick()
            time_fn.now += 1.0
            display.update(loss=0.5)
    lines = [line for line in out.getvalue().splitlines() if "%)" in line]
    assert [line.split()[1] for line in lines] == ["5/10", "10/10"]


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"total_steps": 0}, "total_steps"),
        ({"total_steps": 2.5}, "total_steps"),
        ({"every_n_steps": 0}, "every_n_steps"),
        ({"every_n_steps": "10"}, "every_n_steps"),
    ],
)
def test_bad_display_parameters(kwargs, parameter):
    """Bad total_steps and every_n_steps are refused, naming them."""
    with pytest.raises(ConfigError, match=f"`{parameter}`"):
        ProgressDisplay(Clock(), stream=io.StringIO(), **kwargs)


def test_live_without_rich(monkeypatch):
    """live=True without rich installed names the extra to install."""
    monkeypatch.setattr("globalstep.summary._progress._rich_available", lambda: False)
    with pytest.raises(ConfigError, match=r"pip install 'globalstep\[progress\]'"):
        ProgressDisplay(Clock(), stream=io.StringIO(), live=True)


def test_meter_needs_a_clock():
    """A meter on something that is not a Clock is refused."""
    with pytest.raises(ConfigError, match="`clock` must be a globalstep Clock"):
        ThroughputMeter("global_step")


def test_format_seconds_of_infinity():
    """An unknown duration formats as '?'."""
    assert format_seconds(float("inf")) == "?"


def test_display_needs_a_clock():
    """A display on something that is not a Clock is refused."""
    with pytest.raises(ConfigError, match="`clock` must be a globalstep Clock"):
        ProgressDisplay("global_step", stream=io.StringIO())


class FakeTerminal(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self):
        return True


def test_terminal_gets_the_live_bar_by_default():
    """With live unset, a terminal stream gets rich's bar and a plain stream gets lines."""
    pytest.importorskip("rich")
    clock = Clock()
    with ProgressDisplay(clock, 10, stream=FakeTerminal(), time_fn=FakeTime()) as display:
        assert display._bar is not None
    with ProgressDisplay(clock, 10, stream=io.StringIO(), time_fn=FakeTime()) as display:
        assert display._bar is None


def test_next_due_is_the_step_of_the_next_plain_line():
    """next_due, the public "is a call due" step, is the step of the next plain line: below
    it update() only compares the step, at it the line is printed."""
    clock, out = Clock(), io.StringIO()
    display = ProgressDisplay(clock, every_n_steps=10, stream=out, live=False)
    assert display.next_due == 0
    clock.tick()
    display.update()
    assert display.next_due == 10
    clock.tick(9)
    display.update(loss=1.0)
    assert display.next_due == 20
    assert out.getvalue().startswith("step 10")


def test_next_due_is_zero_while_a_live_bar_is_shown():
    """With a live bar every update may redraw it, so next_due stays 0 until close()."""
    pytest.importorskip("rich")
    clock, time_fn = Clock(), FakeTime()
    display = ProgressDisplay(
        clock, 50, every_n_steps=10, stream=io.StringIO(), live=True, time_fn=time_fn
    )
    for _ in range(5):
        clock.tick()
        time_fn.now += 1.0
        display.update(loss=0.5)
        assert display.next_due == 0
    display.close()
    assert display.next_due == 10
