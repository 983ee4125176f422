"""Tests for globalstep.schedules._compose: warmup, join, scale and clip."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from globalstep import Clock, ConfigError, ConversionError
from globalstep.schedules import (
    Constant,
    CosineDecay,
    ExponentialDecay,
    Join,
    Linear,
    clip,
    from_config,
    join,
    scale,
    warmup,
)

from .strategies import any_schedule, steps


@st.composite
def joins(draw: st.DrawFn):
    parts = draw(st.lists(any_schedule, min_size=1, max_size=4))
    bounds = sorted(
        draw(st.sets(st.integers(1, 10**6), min_size=len(parts) - 1, max_size=len(parts) - 1))
    )
    return join(parts, bounds)


composites = st.one_of(
    joins(),
    st.builds(
        warmup,
        any_schedule,
        st.integers(1, 1000),
        st.floats(0, 1),
        st.sampled_from(["linear", "cosine"]),
    ),
    st.builds(scale, any_schedule, st.floats(-10, 10)),
    st.builds(clip, any_schedule, st.floats(-5, 0), st.floats(0, 5)),
)


@settings(deadline=None)
@given(schedule=joins())
def test_join_meets_each_part_at_its_boundary(schedule):
    """At each boundary a join gives the next part's step-0 value, just before it the last."""
    starts = (0, *schedule.boundaries)
    cast = schedule.numpy_dtype.type
    for i, b in enumerate(schedule.boundaries):
        assert schedule(b) == float(cast(schedule.schedules[i + 1](0)))
        assert schedule(b - 1) == float(cast(schedule.schedules[i](b - 1 - starts[i])))


@settings(deadline=None)
@given(a=st.floats(-5, 5), b=st.floats(-5, 5), n=st.integers(1, 1000), tail=st.integers(0, 100))
def test_join_is_continuous_where_parts_meet(a, b, n, tail):
    """A line joined to a constant at its end value never jumps at the boundary."""
    lr = join([Linear(a, b, n), Constant(b)], [n])
    values = lr.values(np.arange(n - 1, n + tail + 1))
    assert values[1] == b
    assert abs(values[1] - values[0]) <= abs(b - a) / n * (1 + 1e-9) + 1e-15


@settings(deadline=None)
@given(
    schedule=any_schedule,
    w=st.integers(1, 1000),
    start=st.floats(0, 1),
    shape=st.sampled_from(["linear", "cosine"]),
)
def test_warmup_starts_at_start_value_and_reaches_the_schedule(schedule, w, start, shape):
    """A warm-up starts at start_value and hands over to schedule(0) at its end."""
    lr = warmup(schedule, w, start, shape)
    assert lr(0) == float(lr.numpy_dtype.type(start))
    assert lr(w) == schedule(0)


def test_exponential_warmup_is_geometric():
    """An exponential warm-up multiplies by the same factor each step."""
    lr = warmup(Constant(1.0), 2, 0.25, "exponential")
    assert lr.values([0, 1, 2]).tolist() == [0.25, 0.5, 1.0]


@settings(deadline=None)
@given(schedule=composites, drawn=st.lists(steps, min_size=1, max_size=20))
def test_composite_values_equal_call_bit_for_bit(schedule, drawn):
    """A composite's values() equals its __call__ element by element, bit for bit."""
    bits = schedule.values(drawn).astype(np.float64).view(np.uint64)
    calls = np.array([schedule(s) for s in drawn]).view(np.uint64)
    assert bits.tolist() == calls.tolist()


@settings(deadline=None)
@given(schedule=composites)
def test_composite_config_round_trip(schedule):
    """A composite's config goes through JSON and back to an equal schedule."""
    assert from_config(json.loads(json.dumps(schedule.to_config()))) == schedule


@settings(deadline=None)
@given(schedule=composites, drawn=st.lists(steps, min_size=1, max_size=20))
def test_composites_are_finite(schedule, drawn):
    """Composites of finite schedules are finite at every step."""
    assert np.isfinite(schedule.values(drawn)).all()


def test_composite_takes_its_part_dtype():
    """A composite computes in its first part's dtype unless told otherwise."""
    assert warmup(CosineDecay(1.0, 10, dtype="float32"), 5).values([1]).dtype == np.float32


def test_scale_and_clip():
    """scale multiplies and clip bounds the values."""
    lr = clip(scale(Linear(0.0, 1.0, 10), 10.0), low=1.0, high=5.0)
    assert lr.values([0, 3, 10]).tolist() == [1.0, 3.0, 5.0]


def test_end_step_of_a_warmup_adds_its_length():
    """A warm-up of 10 steps before a 100-step cosine ends at step 110."""
    assert warmup(CosineDecay(1.0, 100), 10).end_step() == 110


def test_describe_nests():
    """A composite's description includes its parts'."""
    assert "cosine_decay(" in warmup(CosineDecay(1.0, 100), 10).describe()


def test_resolve_reaches_the_parts():
    """resolve() converts durations inside the parts too."""
    lr = join([Linear(0.0, 1.0, "1ep"), CosineDecay(1.0, "2ep")], ["1ep"])
    resolved = lr.resolve(Clock(steps_per_epoch=5))
    assert resolved.boundaries == (5,)
    assert resolved.schedules[1].decay_steps == 10


def test_unresolved_join_boundary_names_what_is_missing():
    """A join with an epoch boundary, unresolved, names steps_per_epoch when called."""
    with pytest.raises(ConversionError, match="steps_per_epoch"):
        join([Constant(1.0), Constant(2.0)], ["1ep"])(0)


INVALID = [
    ("join wrong count", lambda: join([Constant(1.0)], [5]), "boundaries", r"\(5,\)"),
    (
        "join unsorted",
        lambda: join([Constant(1.0)] * 3, [10, 5]),
        "boundaries",
        r"\(10, 5\)",
    ),
    ("join empty", lambda: join([], []), "schedules", r"\(\)"),
    ("join not a schedule", lambda: join([Constant(1.0), 0.5], [3]), "schedules", "0.5"),
    ("warmup zero steps", lambda: warmup(Constant(1.0), 0), "steps", "0"),
    ("warmup unknown shape", lambda: warmup(Constant(1.0), 5, shape="step"), "shape", "'step'"),
    (
        "exponential warmup from zero",
        lambda: warmup(Constant(1.0), 5, 0.0, "exponential"),
        "start_value",
        "0.0",
    ),
    (
        "exponential warmup to zero",
        lambda: warmup(Constant(0.0), 5, 0.1, "exponential"),
        "schedule",
        "0.0",
    ),
    ("warmup not a schedule", lambda: warmup(0.1, 5), "schedule", "0.1"),
    ("scale NaN", lambda: scale(Constant(1.0), float("nan")), "factor", "nan"),
    ("clip no bounds", lambda: clip(Constant(1.0)), "high", "None"),
    ("clip high below low", lambda: clip(Constant(1.0), 2.0, 1.0), "high", "1.0"),
    ("clip inf", lambda: clip(Constant(1.0), float("-inf")), "low", "-inf"),
]


@pytest.mark.parametrize(
    ("build", "parameter", "value"),
    [case[1:] for case in INVALID],
    ids=[case[0] for case in INVALID],
)
def test_invalid_composite_names_parameter_and_value(build, parameter, value):
    """An invalid composite raises ConfigError naming the parameter and the value received."""
    with pytest.raises(ConfigError, match=rf"`{parameter}` .*; got {parameter}=.*{value}"):
        build()


def test_float32_part_inside_float64_join():
    """A float32 part inside a float64 join keeps the part's float32 values."""
    part = ExponentialDecay(0.1, 10, 0.9, dtype="float32")
    lr = Join((part,), (), dtype="float64")
    assert lr(3) == float(np.float32(part(3)))


def test_warmup_past_its_end_computes_only_the_schedule(monkeypatch):
    """After the warm-up values() evaluates the wrapped schedule once (no ramp target)."""
    inner = CosineDecay(1.0, 100)
    lr, expected = warmup(inner, 10), inner(50)
    seen = []
    real = CosineDecay.compute
    monkeypatch.setattr(
        CosineDecay, "compute", lambda self, s: seen.append(s.tolist()) or real(self, s)
    )
    assert lr.values([60])[0] == expected
    assert seen == [[50]]
    seen.clear()
    assert lr.values([5])[0] == 0.5
    assert seen == [[0]]


def test_describe_a_join_names_each_part_from_its_boundary():
    """A join's description lists each part with the step it starts from."""
    text = join([Linear(0.0, 1.0, 10), Constant(1.0)], [10]).describe()
    assert "from 0: linear(" in text
    assert "; from 10: constant(" in text


def test_join_is_resolved_only_when_its_parts_are():
    """A join of a part with an epoch length is unresolved until resolve() is called."""
    lr = join([Linear(0.0, 1.0, "1ep"), Constant(1.0)], [3])
    assert not lr.resolved
    assert lr.resolve(steps_per_epoch=3).resolved


def test_scale_and_clip_end_where_their_schedule_ends():
    """scale and clip keep their schedule's end step."""
    assert scale(CosineDecay(1.0, 100), 2.0).end_step() == 100
    assert clip(Linear(0.0, 1.0, 10), high=0.5).end_step() == 10
