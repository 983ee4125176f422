"""Tests for globalstep.schedules.core: the catalogue, its properties and its errors."""

from __future__ import annotations

import dataclasses
import json
import math
import re

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from globalstep import Clock, ConfigError, ConversionError, DurationError, StepError
from globalstep.schedules import (
    Constant,
    CosineDecay,
    CosineDecayRestarts,
    ExponentialDecay,
    InverseSqrt,
    InverseTimeDecay,
    Linear,
    LinearCosineDecay,
    NaturalExpDecay,
    NoisyLinearCosineDecay,
    OneCycle,
    PiecewiseConstant,
    PolynomialDecay,
    Schedule,
    WarmupStableDecay,
    from_config,
    registered,
    warmup,
)

from .strategies import SCHEDULES, steps

STEP_ZERO = {
    "constant": lambda s: s.value,
    "linear": lambda s: s.initial,
    "exponential_decay": lambda s: max(s.initial, s.end_value or 0.0),
    "natural_exp_decay": lambda s: s.initial,
    "inverse_time_decay": lambda s: s.initial,
    "piecewise_constant": lambda s: s.levels[0],
    "polynomial_decay": lambda s: s.initial,
    "cosine_decay": lambda s: s.initial,
    "cosine_decay_restarts": lambda s: s.initial,
    "linear_cosine_decay": lambda s: s.initial * (s.alpha + 1 + s.beta),
    "noisy_linear_cosine_decay": lambda s: (
        s.initial * (s.alpha + 1 + math.sqrt(s.initial_variance) * _z0(s.seed) + s.beta)
    ),
    "one_cycle": lambda s: s.peak / s.div_factor,
    "inverse_sqrt": lambda s: s.peak / s.warmup_steps,
    "warmup_stable_decay": lambda s: s.initial if s.warmup_steps else s.peak,
}


def _z0(seed: int) -> float:
    """The noise draw of the noisy linear-cosine decay at step 0."""
    from globalstep.schedules import standard_normal

    return float(standard_normal(seed, np.zeros(1, np.int64))[0])


# Schedules documented as monotone: +1 non-decreasing, -1 non-increasing, per step range.
MONOTONE = {
    "exponential_decay": -1,
    "natural_exp_decay": -1,
    "inverse_time_decay": -1,
    "cosine_decay": -1,
}


def _bits(values: np.ndarray) -> list[int]:
    return np.asarray(values, dtype=np.float64).view(np.uint64).tolist()


@pytest.mark.parametrize("name", sorted(SCHEDULES))
@settings(deadline=None)
@given(data=st.data())
def test_finite_at_every_step(name, data):
    """Every core schedule is finite at every step >= 0, up to 2**63-1."""
    schedule = data.draw(SCHEDULES[name])
    drawn = data.draw(st.lists(steps, min_size=1, max_size=20))
    assert np.isfinite(schedule.values(drawn)).all()
    assert math.isfinite(schedule(drawn[0]))


@pytest.mark.parametrize("name", sorted(STEP_ZERO))
@settings(deadline=None)
@given(data=st.data())
def test_value_at_step_zero(name, data):
    """Every core schedule gives its documented value at step 0."""
    schedule = data.draw(SCHEDULES[name])
    # float32 rounds each operation: allow its precision relative to parameters up to 10.
    tolerance = 1e-5 if schedule.dtype == "float32" else 1e-12
    assert schedule(0) == pytest.approx(STEP_ZERO[name](schedule), rel=tolerance, abs=tolerance)


@pytest.mark.parametrize("name", sorted(SCHEDULES))
@settings(deadline=None)
@given(data=st.data())
def test_constant_after_end(name, data):
    """A schedule with an end step keeps its end value at every later step."""
    schedule = data.draw(SCHEDULES[name])
    end = schedule.end_step()
    if end is None:
        return
    later = [end, end + 1, end + data.draw(st.integers(0, 10**9)), 2**62]
    assert schedule.values(later).tolist() == [schedule(end)] * 4


@pytest.mark.parametrize("name", sorted(MONOTONE))
@settings(deadline=None)
@given(data=st.data())
def test_monotone(name, data):
    """Decays documented as monotone never rise from one step to the next."""
    schedule = data.draw(SCHEDULES[name])
    start = data.draw(st.integers(0, 10**6))
    values = schedule.values(np.arange(start, start + 200))
    assert (np.diff(values) * MONOTONE[name] >= 0).all()


@settings(deadline=None)
@given(schedule=st.builds(Linear, st.floats(-5, 5), st.floats(-5, 5), st.integers(1, 500)))
def test_linear_is_monotone_towards_its_end(schedule):
    """A linear schedule moves only towards its end value."""
    diffs = np.diff(schedule.values(np.arange(0, 600)))
    direction = np.sign(schedule.end_value - schedule.initial)
    assert (diffs * direction >= 0).all()


@settings(deadline=None)
@given(schedule=SCHEDULES["polynomial_decay"], start=st.integers(0, 10**6))
def test_polynomial_moves_towards_its_end_value(schedule, start):
    """A polynomial decay without cycle moves only towards its end value."""
    assume(not schedule.cycle)
    diffs = np.diff(schedule.values(np.arange(start, start + 300)))
    assert (diffs * np.sign(schedule.end_value - schedule.initial) >= 0).all()


@settings(deadline=None)
@given(schedule=SCHEDULES["inverse_sqrt"])
def test_inverse_sqrt_rises_then_falls(schedule):
    """InverseSqrt rises up to step warmup_steps - 1 and falls after."""
    w = schedule.warmup_steps
    values = schedule.values(np.arange(0, 3 * w + 2))
    assert (np.diff(values[:w]) >= 0).all()
    assert (np.diff(values[w - 1 :]) <= 0).all()


@pytest.mark.parametrize("name", sorted(SCHEDULES))
@settings(deadline=None)
@given(data=st.data())
def test_config_round_trip(name, data):
    """to_config() through JSON and back gives an equal schedule."""
    schedule = data.draw(SCHEDULES[name])
    config = json.loads(json.dumps(schedule.to_config()))
    assert from_config(config) == schedule
    assert type(schedule).from_config(config) == schedule


@pytest.mark.parametrize("name", sorted(SCHEDULES))
@settings(deadline=None)
@given(data=st.data())
def test_values_equal_call_bit_for_bit(name, data):
    """values() equals __call__ element by element, bit for bit."""
    schedule = data.draw(SCHEDULES[name])
    drawn = data.draw(st.lists(steps, min_size=1, max_size=30))
    assert _bits(schedule.values(drawn)) == _bits(np.array([schedule(s) for s in drawn]))


@settings(deadline=None)
@given(schedule=SCHEDULES["exponential_decay"], step=st.integers(0, 2**53))
def test_exponential_fast_path_matches_values(schedule, step):
    """The exponential decay's scalar fast path gives the bits values() gives."""
    assert _bits(np.array([schedule(step)])) == _bits(schedule.values([step]))


def test_values_keep_the_shape():
    """values() keeps the shape of its input."""
    assert CosineDecay(1.0, 10).values(np.zeros((2, 3), np.int64)).shape == (2, 3)


def test_values_of_empty_array():
    """values() of no steps is an empty array."""
    assert CosineDecay(1.0, 10).values(np.array([], np.int64)).shape == (0,)


def test_float32_dtype_computes_in_float32():
    """dtype='float32' returns float32 values."""
    assert ExponentialDecay(0.1, 10, 0.9, dtype="float32").values([1]).dtype == np.float32


def test_seed_question_never_decays_in_24000_steps():
    """decay_steps=100000 with staircase keeps 0.1 for all 24,000 steps of the seed run."""
    lr = ExponentialDecay(0.1, 100_000, 0.96, staircase=True)
    assert set(lr.values(np.arange(24_000)).tolist()) == {0.1}
    assert lr(100_000) == pytest.approx(0.096)


def test_exponential_end_value_is_a_floor():
    """With rate < 1, end_value is a floor."""
    assert ExponentialDecay(1.0, 1, 0.5, end_value=0.2)(10) == 0.2


def test_exponential_end_value_is_a_ceiling_when_growing():
    """With rate > 1, end_value is a ceiling."""
    assert ExponentialDecay(1.0, 1, 2.0, end_value=5.0)(10) == 5.0


def test_exponential_begin_holds_the_initial_value():
    """Before `begin` the exponential decay keeps its initial value."""
    lr = ExponentialDecay(1.0, 1, 0.5, begin=10)
    assert (lr(10), lr(11)) == (1.0, 0.5)


def test_piecewise_switches_at_the_boundary():
    """PiecewiseConstant's next value starts at the boundary step itself."""
    lr = PiecewiseConstant((5,), (1.0, 2.0))
    assert lr.values([4, 5, 6]).tolist() == [1.0, 2.0, 2.0]


def test_polynomial_cycle_restarts():
    """A cycling polynomial decay restarts from a stretched period."""
    lr = PolynomialDecay(1.0, 10, end_value=0.0, cycle=True)
    assert (lr(10), lr(15)) == (0.0, 0.25)


def test_restarts_restart_at_each_period():
    """SGDR with t_mul=2 restarts at steps 10 and 30."""
    lr = CosineDecayRestarts(1.0, 10, t_mul=2.0, m_mul=0.5)
    assert (lr(10), lr(30)) == (0.5, 0.25)


def test_noisy_is_reproducible_and_seeded():
    """The noisy schedule repeats with one seed and changes with another."""
    a, b = NoisyLinearCosineDecay(1.0, 100, seed=1), NoisyLinearCosineDecay(1.0, 100, seed=2)
    steps_ = np.arange(50)
    assert (
        a.values(steps_).tolist()
        == NoisyLinearCosineDecay(1.0, 100, seed=1).values(steps_).tolist()
    )
    assert a.values(steps_).tolist() != b.values(steps_).tolist()


def test_noise_is_standard_normal():
    """The per-step noise has mean ~0 and variance ~1."""
    from globalstep.schedules import standard_normal

    z = standard_normal(3, np.arange(200_000))
    assert abs(z.mean()) < 0.01
    assert abs(z.var() - 1) < 0.02


def test_one_cycle_reaches_peak_and_floor():
    """OneCycle is at its peak at pct_start * total and at its floor at the end."""
    lr = OneCycle(1.0, 100, div_factor=10.0, final_div_factor=100.0, shape="linear")
    assert (lr(30), lr(100)) == (1.0, pytest.approx(1e-3))


def test_wsd_holds_the_peak():
    """WarmupStableDecay holds its peak between warm-up and decay."""
    lr = WarmupStableDecay(2.0, 100, warmup_steps=10, decay_steps=20)
    assert set(lr.values(np.arange(10, 81)).tolist()) == {2.0}


def test_describe_fills_in_the_parameters():
    """describe() states the formula with the parameters filled in."""
    text = ExponentialDecay(0.1, 1000, 0.96).describe()
    assert "0.1 * 0.96 ** (max(s - 0, 0) / 1000)" in text


def test_duration_lengths_resolve_against_a_clock():
    """A length in epochs is resolved with the clock's steps per epoch."""
    lr = CosineDecay(1.0, "3ep").resolve(Clock(steps_per_epoch=12))
    assert lr.decay_steps == 36
    assert lr.resolved


def test_step_durations_need_no_resolution():
    """A length in steps ('500st') works without resolution."""
    assert CosineDecay(1.0, "500st")(500) == 0.0


def test_unresolved_duration_names_what_is_missing():
    """Calling a schedule with an epoch length unresolved names steps_per_epoch."""
    with pytest.raises(ConversionError, match="steps_per_epoch"):
        CosineDecay(1.0, "3ep")(0)


def test_resolve_without_the_number_names_it():
    """Resolving sample durations without a batch size names batch_size."""
    with pytest.raises(ConversionError, match="batch_size"):
        CosineDecay(1.0, "1e6sp").resolve(Clock())


def test_wall_time_length_is_refused():
    """A wall-time length is refused: it has no fixed number of steps."""
    with pytest.raises(ConfigError, match="`decay_steps` must be counted in steps"):
        CosineDecay(1.0, "30min")


def test_malformed_duration_is_refused():
    """A malformed duration names the parameter."""
    with pytest.raises(DurationError, match="`decay_steps` must be a duration"):
        CosineDecay(1.0, "three epochs")


def test_unknown_config_name():
    """from_config refuses an unknown schedule name and lists the known ones."""
    with pytest.raises(ConfigError, match=r"`config\['name'\]` must be one of .*constant"):
        from_config({"name": "nope"})


def test_config_with_unknown_parameter():
    """from_config refuses a parameter the schedule does not take."""
    with pytest.raises(ConfigError, match="has parameters constant does not take"):
        from_config({"name": "constant", "value": 1.0, "x": 2})


def test_config_not_a_mapping():
    """from_config refuses what is not a mapping."""
    with pytest.raises(ConfigError, match="`config` must be a mapping"):
        from_config([1, 2])


def test_from_config_of_another_class():
    """Class.from_config refuses the config of another class."""
    with pytest.raises(ConfigError, match="must name a CosineDecay"):
        CosineDecay.from_config({"name": "constant", "value": 1.0})


def test_schedule_is_abstract():
    """Schedule itself cannot be built."""
    with pytest.raises(TypeError):
        Schedule()  # type: ignore[abstract]


INVALID = [
    ("zero decay steps", lambda: ExponentialDecay(0.1, 0, 0.9), "decay_steps", "0"),
    ("negative decay steps", lambda: CosineDecay(0.1, -5), "decay_steps", "-5"),
    ("float decay steps", lambda: CosineDecay(0.1, 2.5), "decay_steps", "2.5"),
    ("NaN initial", lambda: ExponentialDecay(float("nan"), 10, 0.9), "initial", "nan"),
    ("inf rate", lambda: ExponentialDecay(0.1, 10, float("inf")), "rate", "inf"),
    ("bool initial", lambda: Constant(True), "value", "True"),
    ("string initial", lambda: Constant("0.1"), "value", "'0.1'"),
    ("zero rate", lambda: ExponentialDecay(0.1, 10, 0.0), "rate", "0.0"),
    ("growth without ceiling", lambda: ExponentialDecay(0.1, 10, 1.5), "end_value", "None"),
    ("negative natural rate", lambda: NaturalExpDecay(0.1, 10, -1.0), "rate", "-1.0"),
    ("negative inverse rate", lambda: InverseTimeDecay(0.1, 10, -1.0), "rate", "-1.0"),
    ("staircase not bool", lambda: InverseTimeDecay(0.1, 10, 1.0, staircase=1), "staircase", "1"),
    ("negative begin", lambda: Linear(0.0, 1.0, 10, begin=-1), "begin", "-1"),
    ("zero linear steps", lambda: Linear(0.0, 1.0, 0), "steps", "0"),
    (
        "wrong boundary count",
        lambda: PiecewiseConstant((10, 20), (1.0, 2.0)),
        "boundaries",
        r"\(10, 20\)",
    ),
    (
        "unsorted boundaries",
        lambda: PiecewiseConstant((20, 10), (1.0, 2.0, 3.0)),
        "boundaries",
        r"\(20, 10\)",
    ),
    (
        "repeated boundaries",
        lambda: PiecewiseConstant((10, 10), (1.0, 2.0, 3.0)),
        "boundaries",
        r"\(10, 10\)",
    ),
    ("zero boundary", lambda: PiecewiseConstant((0,), (1.0, 2.0)), "boundaries", "0"),
    ("no levels", lambda: PiecewiseConstant((), ()), "levels", r"\(\)"),
    ("NaN level", lambda: PiecewiseConstant((), (math.nan,)), "levels", "nan"),
    ("list boundaries", lambda: PiecewiseConstant([1], (1.0, 2.0)), "boundaries", r"\[1\]"),
    ("zero power", lambda: PolynomialDecay(0.1, 10, power=0.0), "power", "0.0"),
    ("cycle not bool", lambda: PolynomialDecay(0.1, 10, cycle="yes"), "cycle", "'yes'"),
    ("alpha above one", lambda: CosineDecay(0.1, 10, alpha=1.5), "alpha", "1.5"),
    ("zero exponent", lambda: CosineDecay(0.1, 10, exponent=0.0), "exponent", "0.0"),
    ("t_mul below one", lambda: CosineDecayRestarts(0.1, 10, t_mul=0.5), "t_mul", "0.5"),
    ("m_mul above one", lambda: CosineDecayRestarts(0.1, 10, m_mul=2.0), "m_mul", "2.0"),
    ("negative periods", lambda: LinearCosineDecay(0.1, 10, num_periods=-1), "num_periods", "-1"),
    ("negative variance", lambda: NoisyLinearCosineDecay(0.1, 10, -1.0), "initial_variance", ""),
    ("negative seed", lambda: NoisyLinearCosineDecay(0.1, 10, seed=-1), "seed", "-1"),
    ("pct_start of one", lambda: OneCycle(1.0, 100, pct_start=1.0), "pct_start", "1.0"),
    ("zero div factor", lambda: OneCycle(1.0, 100, div_factor=0.0), "div_factor", "0.0"),
    ("unknown shape", lambda: OneCycle(1.0, 100, shape="square"), "shape", "'square'"),
    ("one-step cycle", lambda: OneCycle(1.0, 1), "total_steps", "1"),
    ("zero warmup", lambda: InverseSqrt(1.0, 0), "warmup_steps", "0"),
    (
        "wsd too short",
        lambda: WarmupStableDecay(1.0, 10, warmup_steps=6, decay_steps=6),
        "total_steps",
        "10",
    ),
    (
        "unknown decay shape",
        lambda: WarmupStableDecay(1.0, 10, 1, 1, decay_shape="exp"),
        "decay_shape",
        "'exp'",
    ),
    ("unknown dtype", lambda: Constant(1.0, dtype="float16"), "dtype", "'float16'"),
]


@pytest.mark.parametrize(
    ("build", "parameter", "value"),
    [case[1:] for case in INVALID],
    ids=[case[0] for case in INVALID],
)
def test_invalid_parameter_names_parameter_and_value(build, parameter, value):
    """An invalid parameter raises ConfigError naming the parameter and the value received."""
    with pytest.raises(ConfigError, match=rf"`{parameter}` .*; got {parameter}=.*{value}"):
        build()


@pytest.mark.parametrize(
    ("step", "shown"),
    [(-1, "-1"), (1.5, "1.5"), (True, "True"), ("3", "'3'"), (2**63, str(2**63))],
    ids=["negative", "float", "bool", "string", "too large"],
)
def test_invalid_step_is_refused(step, shown):
    """A negative, non-integer or too large step raises StepError showing the step."""
    with pytest.raises(StepError, match=rf"`step` must be .*step={shown}"):
        ExponentialDecay(0.1, 10, 0.9)(step)


@pytest.mark.parametrize(
    ("steps", "shown"),
    [
        ([0, -3], "step=-3"),
        (np.array([0.5]), "float64"),
        (np.array([2**63], np.uint64), f"<= 2\\*\\*63-1; got step={2**63}"),
    ],
    ids=["negative", "float array", "too large"],
)
def test_invalid_steps_array_is_refused(steps, shown):
    """values() refuses negative steps and non-integer arrays, showing what it got."""
    with pytest.raises(StepError, match=rf"`steps` must be .*{shown}"):
        CosineDecay(0.1, 10).values(steps)


def test_numpy_integer_step_is_accepted():
    """A numpy integer step is accepted and gives the same value as an int."""
    lr = ExponentialDecay(0.1, 10, 0.9)
    assert lr(np.int64(7)) == lr(7)


class _Index:
    """An integer of another library: it has ``__index__`` and is no int."""

    def __index__(self) -> int:
        return 7


def test_any_index_integer_step_is_accepted_but_a_bool():
    """Anything operator.index takes is a step, as the checkpoint manager takes it; a
    NumPy bool or float is refused as a Python one is."""
    lr = ExponentialDecay(0.1, 10, 0.9)
    assert lr(_Index()) == lr(np.uint8(7)) == lr(7)
    for bad in (np.True_, np.float64(7.0)):
        with pytest.raises(StepError, match=r"`step` must be an int >= 0; got step="):
            lr(bad)


def test_exponential_with_epoch_begin_resolves():
    """An exponential decay whose begin is in epochs works once resolved, not before."""
    lr = ExponentialDecay(1.0, 1, 0.5, begin="1ep")
    with pytest.raises(ConversionError, match="steps_per_epoch"):
        lr(0)
    assert lr.resolve(steps_per_epoch=2)(3) == 0.5


def test_exponential_fast_path_at_an_exact_square():
    """At p = 2.0 exactly the scalar call still gives values()'s bits (NumPy's scalar and
    array power differ there)."""
    lr = ExponentialDecay(1.0, 5840, 0.010000000000000002)
    assert _bits(np.array([lr(11_680)])) == _bits(lr.values([11_680]))


# One valid set of arguments per core schedule, the base for the sweeps below.
VALID = {
    "constant": {"value": 0.1},
    "linear": {"initial": 0.0, "end_value": 1.0, "steps": 10},
    "exponential_decay": {"initial": 0.1, "decay_steps": 10, "rate": 0.9},
    "natural_exp_decay": {"initial": 0.1, "decay_steps": 10, "rate": 0.5},
    "inverse_time_decay": {"initial": 0.1, "decay_steps": 10, "rate": 0.5},
    "piecewise_constant": {"boundaries": (10,), "levels": (1.0, 0.5)},
    "polynomial_decay": {"initial": 0.1, "decay_steps": 10},
    "cosine_decay": {"initial": 0.1, "decay_steps": 10},
    "cosine_decay_restarts": {"initial": 0.1, "first_decay_steps": 10},
    "linear_cosine_decay": {"initial": 0.1, "decay_steps": 10},
    "noisy_linear_cosine_decay": {"initial": 0.1, "decay_steps": 10},
    "one_cycle": {"peak": 1.0, "total_steps": 100},
    "inverse_sqrt": {"peak": 1.0, "warmup_steps": 10},
    "warmup_stable_decay": {"peak": 1.0, "total_steps": 100, "warmup_steps": 10, "decay_steps": 10},
}
FAMILIES = ("_polynomial", "_decay", "_cosine", "_warmup_decay")  # the core schedules' modules
CORE = {
    name: cls for name, cls in registered().items() if cls.__module__.rsplit(".", 1)[-1] in FAMILIES
}


def test_sweeps_cover_every_core_schedule():
    """The sweeps below, and the step-0 property, cover every core schedule."""
    assert sorted(VALID) == sorted(STEP_ZERO) == sorted(CORE)


def _sweep(kind: str) -> list[tuple[str, str, object]]:
    cases = []
    for name, cls in sorted(CORE.items()):
        if kind == "length":
            for field, minimum in cls.lengths.items():
                if field == "boundaries":  # each boundary is a length; the error shows it
                    cases += [(name, field, (0,)), (name, field, (-1,))]
                    continue
                bad = (0, -1) if minimum >= 1 else (-1,)
                cases += [(name, field, value) for value in bad]
        else:
            for spec in dataclasses.fields(cls):
                if "float" in str(spec.type) and "tuple" not in str(spec.type):
                    cases += [(name, spec.name, math.nan), (name, spec.name, math.inf)]
    return cases


@pytest.mark.parametrize(
    ("name", "field", "value"), _sweep("length"), ids=lambda v: str(v).replace(" ", "")
)
def test_every_length_refuses_zero_and_negative(name, field, value):
    """Every length of every core schedule refuses 0 (where it must be >= 1) and negatives,
    naming the parameter and the value received."""
    shown = repr(value[0] if isinstance(value, tuple) else value)
    with pytest.raises(ConfigError, match=rf"`{field}` .*; got {field}={re.escape(shown)}\."):
        CORE[name](**{**VALID[name], field: value})


@pytest.mark.parametrize(("name", "field", "value"), _sweep("number"), ids=str)
def test_every_number_refuses_nan_and_inf(name, field, value):
    """Every float parameter of every core schedule refuses NaN and inf, naming both."""
    with pytest.raises(ConfigError, match=rf"`{field}` .*; got {field}={value!r}"):
        CORE[name](**{**VALID[name], field: value})


@pytest.mark.parametrize("name", sorted(VALID))
@pytest.mark.parametrize(
    ("step", "shown"),
    [(-1, "-1"), (2.0, "2.0"), (np.float64(3.0), r"np.float64\(3.0\)"), ("4", "'4'")],
)
def test_every_schedule_refuses_bad_steps(name, step, shown):
    """Every core schedule refuses a negative or non-integer step, showing it, in __call__
    and values()."""
    schedule = CORE[name](**VALID[name])
    with pytest.raises(StepError, match=rf"`step` must be an int >= 0; got step={shown}\."):
        schedule(step)
    with pytest.raises(StepError, match=r"`steps` must be an array of ints >= 0"):
        schedule.values([0, step])


def test_zero_steps_as_a_duration_is_refused():
    """A length of '0st' breaks the same rule as 0, naming the text received."""
    with pytest.raises(ConfigError, match=r"`decay_steps` must be >= 1; got decay_steps='0st'\."):
        ExponentialDecay(0.1, "0st", 0.9)


def test_numpy_integer_length_is_a_step_count():
    """A NumPy integer length counts steps, and the config stays JSON-ready."""
    schedule = CosineDecay(np.float64(1.0), np.int64(10))
    assert schedule(10) == CosineDecay(1.0, 10)(10)
    config = json.loads(json.dumps(schedule.to_config()))
    assert config["decay_steps"] == 10
    assert config["initial"] == 1.0


def test_describe_natural_exp_shows_its_period():
    """NaturalExpDecay's description floors the period only when it is a staircase."""
    stairs = NaturalExpDecay(1.0, 10, 0.5, staircase=True).describe()
    assert stairs.endswith("v(s) = 1.0 * exp(-0.5 * floor(s / 10))")
    assert NaturalExpDecay(1.0, 10, 0.5).describe().endswith("v(s) = 1.0 * exp(-0.5 * (s / 10))")


@pytest.mark.parametrize("name", sorted(n for n in VALID if CORE[n].lengths))
def test_none_length_is_refused_at_construction(name):
    """A length given as None is refused when the schedule is built, naming it."""
    field = next(iter(CORE[name].lengths))
    with pytest.raises(ConfigError, match=rf"`{field}` must be .*; got {field}=None"):
        CORE[name](**{**VALID[name], field: None})


def test_schedule_called_with_a_clock_reads_its_step():
    """lr(clock) and lr(clock.progress()) are lr(clock.step), as save(clock, ...) takes a clock."""
    from globalstep import Clock

    lr = CosineDecay(0.1, 100)
    clock = Clock()
    clock.tick(37)
    assert lr(clock) == lr(clock.progress()) == lr(37)


@dataclasses.dataclass(frozen=True)
class _Halving(Schedule):
    """A schedule written outside the catalogue: it implements the public hook, compute."""

    initial: float

    def __post_init__(self) -> None:
        self._setup()

    def compute(self, steps):
        return self.initial * 0.5 ** steps.astype(np.float64)


def test_a_subclass_implements_compute_and_gets_the_call_and_values():
    lr = _Halving(8.0)
    assert lr(3) == 1.0
    assert lr.values([0, 1, 2]).tolist() == [8.0, 4.0, 2.0]
    assert warmup(lr, 2)(3) == 4.0


@pytest.mark.parametrize("name", sorted(VALID))
def test_compute_is_values_on_checked_steps(name):
    schedule = CORE[name](**VALID[name])
    steps = np.arange(0, 3000, 7, dtype=np.int64)
    with np.errstate(all="ignore"):  # as values() runs it
        out = np.asarray(schedule.compute(steps), dtype=schedule.numpy_dtype)
    assert out.tobytes() == schedule.values(steps).tobytes()


def test_no_checkpoint_records_where_a_core_schedule_lives():
    """A saved tree holding core schedules records their fields, never their module: the
    bytes stay the same wherever the code of a class lives (issue 34 moved them)."""
    from globalstep.checkpoint import flatten_tree

    tree = {name: CORE[name](**VALID[name]) for name in sorted(CORE)}
    text = json.dumps(flatten_tree(tree).structure)
    assert "globalstep" not in text
    assert all(f'"{name}"' in text for name in CORE)
