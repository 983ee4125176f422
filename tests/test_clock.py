"""Tests for globalstep._clock."""

import json
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from globalstep import MAX_STEP, Clock, ConfigError, Progress, StepError
from globalstep._clock import check_step


class FakeTime:
    """A monotonic clock that moves only when told."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_new_clock_is_at_step_zero():
    """A new clock has applied no update."""
    p = Clock().progress()
    assert (p.step, p.epoch, p.step_in_epoch, p.samples, p.tokens) == (0, 0, 0, 0, 0)


def test_step_twelve_is_first_step_of_second_epoch():
    """With 12 batches per epoch, step 12 is epoch index 1, step_in_epoch 0 (the seed's case)."""
    clock = Clock(steps_per_epoch=12, batch_size=100)
    for _ in range(11):
        clock.tick()
    assert (clock.epoch, clock.step_in_epoch) == (0, 11)
    clock.tick()
    assert (clock.step, clock.epoch, clock.step_in_epoch, clock.samples) == (12, 1, 0, 1200)


def test_2000_epochs_of_1200_rows_is_24000_steps():
    """1,200 rows at batch 100 for 2,000 epochs is 24,000 steps (seed 001)."""
    clock = Clock(steps_per_epoch=12, batch_size=100)
    clock.tick(24_000)
    assert (clock.step, clock.epoch, clock.samples) == (24_000, 2000, 2_400_000)


def test_two_named_clocks_count_separately():
    """A critic ticked 5 times per generator tick reports its own count (seed 002's GAN)."""
    generator, critic = Clock("generator"), Clock("critic")
    for _ in range(10):
        for _ in range(5):
            critic.tick()
        generator.tick()
    assert (generator.step, critic.step) == (10, 50)
    assert generator.progress().clock == "generator"


def test_big_tick_rolls_several_epochs():
    """A tick covering several epochs rolls all of them."""
    clock = Clock(steps_per_epoch=4)
    clock.tick(10)
    assert (clock.epoch, clock.step_in_epoch) == (2, 2)


def test_end_epoch_without_steps_per_epoch():
    """end_epoch() closes an epoch the clock cannot count itself, and is idempotent."""
    clock = Clock()
    clock.tick(7)
    clock.end_epoch()
    clock.end_epoch()
    assert (clock.epoch, clock.step_in_epoch) == (1, 0)


def test_end_epoch_after_rollover_is_harmless():
    """end_epoch() right after an automatic roll-over does not count a second epoch."""
    clock = Clock(steps_per_epoch=3)
    clock.tick(3)
    clock.end_epoch()
    assert clock.epoch == 1


def test_end_epoch_closes_partial_epoch():
    """end_epoch() ends a short last epoch (no drop_last) and the next one starts fresh."""
    clock = Clock(steps_per_epoch=3)
    clock.tick(5)
    clock.end_epoch()
    clock.tick(3)
    assert (clock.step, clock.epoch, clock.step_in_epoch) == (8, 3, 0)


def test_samples_and_tokens_explicit():
    """tick() counts the samples and tokens it is given."""
    clock = Clock(tokens_per_step=10)
    clock.tick(samples=30)
    clock.tick(2, samples=64, tokens=5)
    assert (clock.samples, clock.tokens) == (94, 15)


@pytest.mark.parametrize("n", [0, -1, 1.0, "1", True, None, np.float64(1.0), np.True_])
def test_bad_tick_is_rejected(n):
    """A tick that is not an int >= 1 raises StepError naming n."""
    with pytest.raises(StepError, match="`n` must be"):
        Clock().tick(n)


def test_numpy_integer_tick():
    """A NumPy integer number of updates is a count like an int; the step stays an int."""
    clock = Clock()
    clock.tick(np.int64(3))
    clock.tick(np.int32(2))
    assert clock.step == 5
    assert type(clock.step) is int


@pytest.mark.parametrize(("kwarg", "value"), [("samples", -1), ("tokens", 1.5)])
def test_bad_samples_or_tokens_rejected(kwarg, value):
    """Negative or fractional samples/tokens raise ConfigError naming the parameter."""
    with pytest.raises(ConfigError, match=f"`{kwarg}`"):
        Clock().tick(**{kwarg: value})


def test_step_past_int64_rejected():
    """A tick that would move the step past int64 is an error, and the step is unchanged."""
    clock = Clock()
    state = clock.state_dict() | {"step": MAX_STEP - 1, "step_in_epoch": MAX_STEP - 1}
    clock.load_state_dict(state)
    clock.tick()
    with pytest.raises(StepError, match="past int64") as info:
        clock.tick()
    assert info.value.step == MAX_STEP + 1
    assert clock.step == MAX_STEP


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"name": ""}, "name"),
        ({"name": 3}, "name"),
        ({"steps_per_epoch": 0}, "steps_per_epoch"),
        ({"steps_per_epoch": 2.5}, "steps_per_epoch"),
        ({"batch_size": -4}, "batch_size"),
        ({"tokens_per_step": True}, "tokens_per_step"),
        ({"time_fn": 5}, "time_fn"),
    ],
)
def test_bad_constructor_arguments(kwargs, parameter):
    """Every bad constructor argument raises ConfigError naming it and the value received."""
    with pytest.raises(ConfigError, match=f"`{parameter}`.*got {parameter}=") as info:
        Clock(**kwargs)
    assert info.value.parameter == parameter


def test_state_round_trips_through_json():
    """state_dict() survives json and restores every counter."""
    fake = FakeTime()
    clock = Clock("g", steps_per_epoch=5, batch_size=8, time_fn=fake)
    clock.tick(7)
    fake.now += 42.0
    restored = Clock("g", steps_per_epoch=5, batch_size=8, time_fn=fake)
    restored.load_state_dict(json.loads(json.dumps(clock.state_dict())))
    a, b = clock.progress(), restored.progress()
    assert a == b
    assert b.elapsed_seconds == 42.0


def test_elapsed_seconds_skips_time_between_runs():
    """Training time accumulates across restarts, without the time between runs."""
    fake = FakeTime()
    first = Clock(time_fn=fake)
    fake.now += 100.0
    saved = first.state_dict()
    fake.now += 5000.0  # the machine was down
    second = Clock(time_fn=fake)
    second.load_state_dict(saved)
    fake.now += 30.0
    assert second.elapsed_seconds == 130.0


@pytest.mark.parametrize(
    ("change", "parameter"),
    [
        ({"name": "other"}, "state['name']"),
        ({"version": 99}, "state['version']"),
        ({"step": -1}, "state['step']"),
        ({"step": 1.5}, "state['step']"),
        ({"samples": None}, "state['samples']"),
        ({"step_in_epoch": 5}, "state['step']"),
        ({"elapsed_seconds": float("inf")}, "state['elapsed_seconds']"),
        ({"elapsed_seconds": "1"}, "state['elapsed_seconds']"),
    ],
)
def test_bad_state_rejected(change, parameter):
    """A state of another clock, or with a bad field, raises ConfigError naming the field."""
    clock = Clock()
    with pytest.raises(ConfigError) as info:
        clock.load_state_dict(clock.state_dict() | change)
    assert info.value.parameter == parameter


def test_state_must_be_a_mapping():
    """load_state_dict() of a non-mapping raises ConfigError."""
    with pytest.raises(ConfigError, match="`state`"):
        Clock().load_state_dict([1, 2])  # type: ignore[arg-type]


def test_progress_is_frozen_and_round_trips():
    """Progress cannot be changed and survives to_dict/from_dict."""
    p = Clock(batch_size=3).progress()
    with pytest.raises(AttributeError):
        p.step = 5  # type: ignore[misc]
    assert Progress.from_dict(json.loads(json.dumps(p.to_dict()))) == p


def test_snapshot_is_consistent_under_concurrent_ticks():
    """Snapshots read from another thread always agree with themselves (samples = 4 * step)."""
    clock = Clock(steps_per_epoch=7, batch_size=4)
    stop = threading.Event()
    bad: list = []

    def reader() -> None:
        while not stop.is_set():
            p = clock.progress()
            if p.samples != 4 * p.step or p.epoch * 7 + p.step_in_epoch != p.step:
                bad.append(p)

    thread = threading.Thread(target=reader)
    thread.start()
    for _ in range(20_000):
        clock.tick()
    stop.set()
    thread.join()
    assert bad == []


@pytest.mark.parametrize(
    ("change", "parameter"),
    [
        ({"step": -1}, "data['step']"),
        ({"clock": 5}, "data['clock']"),
        ({"batch_size": 0}, "data['batch_size']"),
        ({"elapsed_seconds": float("nan")}, "data['elapsed_seconds']"),
        ({"bogus": 1}, "data"),
    ],
)
def test_progress_from_dict_rejects_bad_fields(change, parameter):
    """Progress.from_dict() names the bad field and the value received."""
    data = Clock().progress().to_dict() | change
    with pytest.raises(ConfigError) as info:
        Progress.from_dict(data)
    assert info.value.parameter == parameter


def test_progress_from_dict_needs_mapping():
    """Progress.from_dict() of a non-mapping raises ConfigError."""
    with pytest.raises(ConfigError, match="`data`"):
        Progress.from_dict(["step", 1])  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(
    steps_per_epoch=st.none() | st.integers(1, 9),
    batch_size=st.none() | st.integers(1, 5),
    moves=st.lists(
        st.one_of(st.just("tick"), st.integers(1, 20), st.just("end_epoch")), max_size=60
    ),
)
def test_counters_agree_with_a_plain_count(steps_per_epoch, batch_size, moves):
    """tick(), tick(n) and end_epoch() in any order leave step, epoch, step_in_epoch and
    samples where counting them one by one puts them."""
    clock = Clock(steps_per_epoch=steps_per_epoch, batch_size=batch_size)
    step = epoch = start = 0
    for move in moves:
        if move == "end_epoch":
            clock.end_epoch()
            if step > start:
                epoch, start = epoch + 1, step
            continue
        for _ in range(1 if move == "tick" else move):
            step += 1
            if steps_per_epoch is not None and step - start == steps_per_epoch:
                epoch, start = epoch + 1, step
        clock.tick() if move == "tick" else clock.tick(move)
    p = clock.progress()
    assert (p.step, p.epoch, p.step_in_epoch) == (step, epoch, step - start)
    assert (clock.step, clock.epoch, clock.step_in_epoch) == (step, epoch, step - start)
    assert p.samples == clock.samples == step * (batch_size or 0)


@settings(max_examples=200, deadline=None)
@given(
    steps_per_epoch=st.none() | st.integers(1, 9),
    batch_size=st.none() | st.integers(1, 5),
    tokens_per_step=st.none() | st.integers(1, 7),
    moves=st.lists(
        st.one_of(
            st.just(("tick",)),
            st.tuples(st.just("counted"), st.integers(1, 20), st.integers(0, 50)),
            st.just(("end_epoch",)),
            st.tuples(st.just("load"), st.integers(0, 40), st.integers(0, 40)),
        ),
        max_size=40,
    ),
)
def test_counters_agree_after_every_move(steps_per_epoch, batch_size, tokens_per_step, moves):
    """Every counter after each move (a plain tick, a tick with its own samples and tokens,
    end_epoch(), a restore of a state whose epoch began more than an epoch ago, as a run
    resumed with fewer steps per epoch has) is what counting the moves one by one gives."""
    clock = Clock(
        steps_per_epoch=steps_per_epoch, batch_size=batch_size, tokens_per_step=tokens_per_step
    )
    step = epoch = start = samples = tokens = 0
    for move in moves:
        if move[0] == "end_epoch":
            clock.end_epoch()
            if step > start:
                epoch, start = epoch + 1, step
        elif move[0] == "load":
            step, start = move[1] + move[2], move[1]
            epoch, samples, tokens = 3, 7 * step, 11 * step
            state = clock.state_dict() | {
                "step": step,
                "epoch": epoch,
                "step_in_epoch": step - start,
                "samples": samples,
                "tokens": tokens,
            }
            clock.load_state_dict(state)
        else:
            n, counted = (1, None) if move[0] == "tick" else (move[1], move[2])
            step += n
            if steps_per_epoch is not None and step - start >= steps_per_epoch:
                rolled = (step - start) // steps_per_epoch
                epoch, start = epoch + rolled, start + rolled * steps_per_epoch
            samples += n * (batch_size or 0) if counted is None else counted
            tokens += n * (tokens_per_step or 0) if counted is None else 2 * counted
            if counted is None:
                clock.tick()
            else:
                clock.tick(n, samples=counted, tokens=2 * counted)
        p = clock.progress()
        expected = (step, epoch, step - start, samples, tokens)
        assert (p.step, p.epoch, p.step_in_epoch, p.samples, p.tokens) == expected
        assert (clock.step, clock.epoch, clock.step_in_epoch) == expected[:3]
        assert (clock.samples, clock.tokens) == expected[3:]
        restored = Clock(steps_per_epoch=steps_per_epoch, batch_size=batch_size)
        restored.load_state_dict(clock.state_dict())
        q = restored.progress()
        assert (q.step, q.epoch, q.step_in_epoch, q.samples, q.tokens) == expected


def test_one_owner_claims_a_clocks_ticks():
    """claim_ticks names the one owner of the ticks; a second owner, a bad name and a
    release by another are refused; the same owner claiming again is harmless."""
    clock = Clock()
    assert clock.tick_owner is None
    clock.claim_ticks("optimizer A")
    clock.claim_ticks("optimizer A")
    assert clock.tick_owner == "optimizer A"
    with pytest.raises(ConfigError, match="is ticked already by optimizer A"):
        clock.claim_ticks("optimizer B")
    with pytest.raises(
        ConfigError, match=r"must hold the claim to release it \(held by optimizer A\)"
    ):
        clock.release_ticks("optimizer B")
    with pytest.raises(ConfigError, match="must be a non-empty str"):
        clock.claim_ticks("")
    clock.release_ticks("optimizer A")
    assert clock.tick_owner is None
    clock.claim_ticks("optimizer B")
    assert "tick_owner" not in json.dumps(clock.state_dict())


@pytest.mark.parametrize(
    ("value", "rule", "shown"),
    [
        (-1, r"must be an int >= 0", "-1"),
        (np.int64(-2), r"must be an int >= 0", r"np.int64\(-2\)"),
        (1.0, r"must be an int >= 0", "1.0"),
        (np.float64(3.0), r"must be an int >= 0", r"np.float64\(3.0\)"),
        (True, r"must be an int >= 0", "True"),
        (np.True_, r"must be an int >= 0", r"np.True_"),
        ("3", r"must be an int >= 0", "'3'"),
        (None, r"must be an int >= 0", "None"),
        (2**63, r"must be <= 2\*\*63-1", str(2**63)),
        (np.uint64(2**64 - 1), r"must be <= 2\*\*63-1", r"np.uint64\(18446744073709551615\)"),
    ],
)
def test_check_step_refuses_what_is_not_a_step(value, rule, shown):
    """check_step refuses a bool, a float, a string, None, a negative or past-int64 value,
    naming the parameter, the rule and the value received, with one error that is both a
    ConfigError and a StepError carrying the value."""
    with pytest.raises(
        ConfigError, match=rf"^`purge_step` {rule}; got purge_step={shown}\.$"
    ) as info:
        check_step(value, "purge_step")
    assert isinstance(info.value, StepError)
    assert info.value.parameter == "purge_step"
    assert info.value.step is value


def test_check_step_cuts_a_huge_value_and_states_the_callers_rule():
    """A 401-digit value is shown cut; a caller's own rules are the ones stated."""
    with pytest.raises(
        StepError, match=r"`step` must be <= 2\*\*63-1; got step='100000000000\.\.\.\(401 digits\)'"
    ):
        check_step(10**400)
    rules = ("is not an int", "is negative", "is too large")
    for value, said in ((1.5, "is not an int"), (-1, "is negative"), (2**63, "is too large")):
        with pytest.raises(ConfigError, match=f"^`at` {said}; got at="):
            check_step(value, "at", rules=rules)


@pytest.mark.parametrize("value", [0, 7, MAX_STEP, np.uint8(7), np.int64(MAX_STEP)])
def test_check_step_returns_an_int(value):
    """A step of any integer kind comes back as a Python int of the same value."""
    step = check_step(value)
    assert type(step) is int
    assert step == int(value)
