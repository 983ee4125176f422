"""Tests for globalstep._triggers."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from globalstep import (
    Clock,
    ConfigError,
    DurationError,
    Trigger,
    all_of,
    any_of,
    at,
    every,
    once,
)


class FakeTime:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fire_steps(trigger: Trigger, ticks: list[int], clock: Clock | None = None) -> list[int]:
    clock = clock or Clock()
    fired = []
    for n in ticks:
        clock.tick(n)
        if trigger.should_fire(clock):
            fired.append(clock.step)
    return fired


def test_every_100_fires_at_multiples_never_at_zero():
    """every(100) fires at 100, 200, ..., 1000 and not at step 0."""
    trigger, clock = every(100), Clock()
    assert not trigger.should_fire(clock)
    assert fire_steps(trigger, [1] * 1000, clock) == list(range(100, 1001, 100))


def test_every_with_start_zero_fires_at_zero():
    """every(100, start=0) also fires at step 0."""
    trigger, clock = every(100, start=0), Clock()
    assert trigger.should_fire(clock)
    assert fire_steps(trigger, [1] * 300, clock) == [100, 200, 300]


def test_every_with_offset_start():
    """every(100, start=50) fires at 50, 150, 250."""
    assert fire_steps(every(100, start=50), [1] * 260) == [50, 150, 250]


def test_every_fires_once_per_crossing_with_big_ticks():
    """Ticks of 3 cross each boundary once: firing right after it, never twice."""
    assert fire_steps(every(10), [3] * 12) == [12, 21, 30]


def test_every_does_not_count_calls():
    """Asking many times at one step fires at most once."""
    clock, trigger = Clock(), every(5)
    clock.tick(5)
    assert [trigger.should_fire(clock) for _ in range(4)] == [True, False, False, False]


def test_every_epoch_fires_at_epoch_ends():
    """every('1ep') fires when an epoch ends, with or without steps_per_epoch."""
    assert fire_steps(every("1ep"), [1] * 36, Clock(steps_per_epoch=12)) == [12, 24, 36]
    clock, trigger, fired = Clock(), every("2ep"), []
    for _ in range(6):
        clock.tick(5)
        clock.end_epoch()
        if trigger.should_fire(clock):
            fired.append(clock.epoch)
    assert fired == [2, 4, 6]


def test_every_half_epoch():
    """every('0.5ep') fires at each half epoch."""
    assert fire_steps(every("0.5ep"), [1] * 24, Clock(steps_per_epoch=12)) == [6, 12, 18, 24]


def test_every_whole_epochs_from_a_fractional_start():
    """every('1ep', start='0.5ep') fires in mid-epoch, at 0.5, 1.5 and 2.5 epochs."""
    clock = Clock(steps_per_epoch=10)
    assert fire_steps(every("1ep", start="0.5ep"), [1] * 30, clock) == [5, 15, 25]


def test_at_fractional_epoch_after_a_whole_one():
    """at('1ep', '1.5ep') fires at 1.5 epochs, not at the end of epoch 2."""
    assert fire_steps(at("1ep", "1.5ep"), [1] * 30, Clock(steps_per_epoch=10)) == [10, 15]


def test_every_samples():
    """every('1000sp') fires on samples consumed."""
    assert fire_steps(every("1000sp"), [1] * 40, Clock(batch_size=64)) == [16, 32]


def test_every_30min_fires_on_training_time():
    """every('30min') fires on the clock's training time, not on steps."""
    fake = FakeTime()
    clock, trigger, fired = Clock(time_fn=fake), every("30min"), []
    for _ in range(10):
        fake.now += 600.0  # ten minutes per step
        clock.tick()
        if trigger.should_fire(clock):
            fired.append(clock.step)
    assert fired == [3, 6, 9]


def test_time_trigger_resumes_on_training_time():
    """After a restart, a time trigger keeps counting training time, not downtime."""
    fake = FakeTime()
    clock, trigger = Clock(time_fn=fake), every("1h")
    fake.now += 1800.0
    clock.tick()
    assert not trigger.should_fire(clock)
    saved_clock, saved_trigger = clock.state_dict(), trigger.state_dict()
    fake.now += 10 * 3600.0  # the run was down for ten hours
    clock2, trigger2 = Clock(time_fn=fake), every("1h")
    clock2.load_state_dict(saved_clock)
    trigger2.load_state_dict(saved_trigger)
    clock2.tick()
    assert not trigger2.should_fire(clock2)
    fake.now += 1800.0
    clock2.tick()
    assert trigger2.should_fire(clock2)


def test_at_fires_at_listed_steps():
    """at(2, 5, 9) fires exactly at those steps, in any order given."""
    assert fire_steps(at(9, 2, 5), [1] * 12) == [2, 5, 9]


def test_at_epoch_durations():
    """at() takes durations of one unit."""
    assert fire_steps(at("1ep", "3ep"), [1] * 12, Clock(steps_per_epoch=3)) == [3, 9]


def test_once_fires_once():
    """once(...) fires the first time the run reaches the duration, then never again."""
    assert fire_steps(once("10st"), [4] * 10) == [12]


def test_any_of_evaluates_every_child():
    """any_of keeps every child current, so none fires late."""
    a, b = every(2), every(3)
    fired = fire_steps(any_of(a, b), [1] * 6)
    assert fired == [2, 3, 4, 6]


def test_all_of_waits_for_every_child():
    """all_of fires once each child has fired since it last fired."""
    assert fire_steps(all_of(every(2), every(5)), [1] * 20) == [5, 10, 15, 20]


def test_fresh_trigger_midway_fires_once_for_the_past():
    """A trigger with no state that first looks at step 250 fires once, then at 300."""
    clock = Clock()
    clock.tick(250)
    trigger = every(100)
    assert [trigger.should_fire(clock), trigger.should_fire(clock)] == [True, False]
    clock.tick(49)
    assert not trigger.should_fire(clock)
    clock.tick(1)
    assert trigger.should_fire(clock)


@pytest.mark.parametrize(
    ("make", "parameter"),
    [
        (lambda: every(0), "duration"),
        (lambda: every("0ep"), "duration"),
        (lambda: every(10, start=-1), "start"),
        (lambda: every("1ep", start="5st"), "start"),
        (lambda: at(), "steps"),
        (lambda: at(1, "2ep"), "steps"),
        (lambda: at(-3), "steps"),
        (lambda: any_of(), "triggers"),
        (lambda: all_of(every(1), 5), "triggers"),
    ],
)
def test_bad_arguments(make, parameter):
    """Each bad argument raises ConfigError naming the parameter."""
    with pytest.raises(ConfigError) as info:
        make()
    assert info.value.parameter == parameter


def test_bad_duration_string():
    """A malformed duration raises DurationError with the grammar."""
    with pytest.raises(DurationError, match="NUMBER UNIT"):
        every("ten steps")


def test_should_fire_needs_progress():
    """should_fire() of something that is not a Progress or Clock is a ConfigError."""
    with pytest.raises(ConfigError, match="`progress`"):
        every(1).should_fire(5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("state", "parameter"),
    [
        ({"spec": "every('7st', start='7st')", "last": None}, "state['spec']"),
        ({"spec": "every('10st', start='10st')", "last": 5}, "state['last']"),
        ({"spec": "every('10st', start='10st')", "last": "x/y"}, "state['last']"),
        ("nope", "state"),
    ],
)
def test_bad_state_rejected(state, parameter):
    """Loading another trigger's state, or a corrupt one, raises ConfigError."""
    with pytest.raises(ConfigError) as info:
        every(10).load_state_dict(state)
    assert info.value.parameter == parameter


def test_combined_bad_state_rejected():
    """A combined trigger refuses a state with the wrong children or latches."""
    t = all_of(every(2), every(3))
    good = t.state_dict()
    with pytest.raises(ConfigError, match="children"):
        t.load_state_dict(good | {"children": []})
    with pytest.raises(ConfigError, match="latched"):
        t.load_state_dict(good | {"latched": [1, 0]})


def make_trigger(kind: int) -> Trigger:
    return [
        lambda: every(7),
        lambda: every(5, start=0),
        lambda: every("1ep"),
        lambda: every("0.5ep"),
        lambda: every("96sp"),
        lambda: at(3, 17, 40),
        lambda: once("2ep"),
        lambda: any_of(every(11), every("1ep")),
        lambda: all_of(every(4), every("1ep")),
    ][kind]()


def run(kind: int, ticks: list[int], interrupt: int | None) -> list[int]:
    """Runs a trigger over ticks, saving and restoring clock and trigger at `interrupt`."""
    clock, trigger = Clock(steps_per_epoch=6, batch_size=32), make_trigger(kind)
    fired = []
    if trigger.should_fire(clock):
        fired.append(0)
    for i, n in enumerate(ticks):
        if i == interrupt:
            saved = json.dumps({"clock": clock.state_dict(), "trigger": trigger.state_dict()})
            clock, trigger = Clock(steps_per_epoch=6, batch_size=32), make_trigger(kind)
            state = json.loads(saved)
            clock.load_state_dict(state["clock"])
            trigger.load_state_dict(state["trigger"])
        clock.tick(n)
        if trigger.should_fire(clock):
            fired.append(clock.step)
    return fired


@settings(max_examples=300, deadline=None)
@given(
    kind=st.integers(min_value=0, max_value=8),
    ticks=st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=40),
    data=st.data(),
)
def test_resume_fires_where_uninterrupted_run_fires(kind, ticks, data):
    """For any ticks and any interruption point, a resumed run fires at the same steps."""
    interrupt = data.draw(st.integers(min_value=0, max_value=len(ticks) - 1))
    assert run(kind, ticks, interrupt) == run(kind, ticks, None)


@settings(max_examples=200, deadline=None)
@given(
    period=st.integers(min_value=1, max_value=50),
    ticks=st.lists(st.integers(min_value=1, max_value=60), min_size=1, max_size=50),
)
def test_every_fires_once_per_crossed_boundary_group(period, ticks):
    """every(p) fires exactly on the ticks that cross at least one multiple of p."""
    clock, trigger = Clock(), every(period)
    for n in ticks:
        before = clock.step
        clock.tick(n)
        crossed = clock.step // period > before // period
        assert trigger.should_fire(clock) == crossed


def test_skip_past_fires_only_ahead():
    """A trigger made mid-run fires only at boundaries ahead after skip_past()."""
    clock = Clock()
    clock.tick(200)
    trigger = any_of(every(100), every(100, start=0))
    trigger.skip_past(clock)
    assert not trigger.should_fire(clock)
    clock.tick(99)
    assert not trigger.should_fire(clock)
    clock.tick(1)
    assert trigger.should_fire(clock)


def test_skip_past_never_moves_back():
    """skip_past() at an earlier point keeps boundaries already fired."""
    clock, trigger = Clock(), every(10)
    clock.tick(30)
    assert trigger.should_fire(clock)
    trigger.skip_past(Clock().progress())
    assert not trigger.should_fire(clock)


@pytest.mark.parametrize("duration", [100, "1ep"])
def test_step_and_epoch_triggers_take_no_snapshot(monkeypatch, duration):
    """every(100) and every('1ep') read one counter of the clock, not a whole Progress."""
    clock, trigger = Clock(steps_per_epoch=100), every(duration)
    clock.tick(100)

    def no_snapshot() -> None:
        raise AssertionError("progress() called on the per-step path")

    monkeypatch.setattr(clock, "progress", no_snapshot)
    assert trigger.should_fire(clock)
    assert not trigger.should_fire(clock)
    assert trigger.state_dict()["last"] == ("100" if duration == 100 else "1")


def test_any_of_samples_and_time_from_one_snapshot():
    """any_of hands one snapshot to children that count samples and training time."""
    fake = FakeTime()
    clock = Clock(batch_size=10, time_fn=fake)
    trigger, fired = any_of(every("100sp"), every("1min")), []
    for _ in range(30):
        fake.now += 5.0
        clock.tick()
        if trigger.should_fire(clock):
            fired.append(clock.step)
    assert fired == [10, 12, 20, 24, 30]


def test_epoch_trigger_on_a_clock_that_counts_no_epochs_warns_once():
    """every('3ep') on a clock without steps_per_epoch, whose epochs never end, says so once."""
    from globalstep._triggers import UncountedEpochWarning

    clock, trigger = Clock("c"), every("3ep")
    clock.tick(5)
    with pytest.warns(UncountedEpochWarning, match=r"clock 'c' does not count them itself"):
        assert trigger.should_fire(clock) is False
    clock.tick()
    assert trigger.should_fire(clock) is False  # once only: no second warning (errors here)


def test_epoch_trigger_with_steps_per_epoch_does_not_warn():
    """A clock that rolls epochs over by itself gives no warning in its first epoch."""
    clock, trigger = Clock(steps_per_epoch=12), every("3ep")
    clock.tick(5)
    assert trigger.should_fire(clock) is False


@settings(max_examples=200, deadline=None)
@given(
    interval=st.integers(1, 40),
    start=st.integers(0, 60),
    ticks=st.lists(st.integers(1, 30), min_size=1, max_size=40),
    restore_at=st.integers(0, 40),
)
def test_step_trigger_fires_at_each_crossed_boundary(interval, start, ticks, restore_at):
    """every(interval, start) on a Clock fires exactly when a boundary start + k * interval
    was crossed since it last fired, also after a state round trip in the middle."""
    clock, trigger = Clock(), every(interval, start=start)
    last, fired, expected = -1, [], []
    for i, n in enumerate(ticks):
        if i == restore_at:
            state = trigger.state_dict()
            trigger = every(interval, start=start)
            trigger.load_state_dict(state)
        if i % 2:
            clock.tick(n)
        else:
            for _ in range(n):
                clock.tick()
        step = clock.step
        crossed = [b for b in range(start, step + 1, interval) if b > last]
        if crossed:
            last = crossed[-1]
            expected.append(step)
        if trigger.should_fire(clock):
            fired.append(step)
    assert fired == expected


@settings(max_examples=100, deadline=None)
@given(
    points=st.lists(st.integers(0, 200), min_size=1, max_size=6),
    ticks=st.lists(st.integers(1, 25), min_size=1, max_size=30),
)
def test_at_trigger_on_a_clock_or_snapshot_fires_once_per_point_passed(points, ticks):
    """at(points) fires once each time the step passes new points, read from a Clock or
    from its Progress alike."""
    clock, on_clock, on_snapshot = Clock(), at(*points), at(*points)
    last = -1
    for n in ticks:
        clock.tick(n)
        passed = [p for p in points if last < p <= clock.step]
        if passed:
            last = clock.step
        assert on_clock.should_fire(clock) == bool(passed)
        assert on_snapshot.should_fire(clock.progress()) == bool(passed)
