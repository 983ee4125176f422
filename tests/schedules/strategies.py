"""Hypothesis strategies that build every core schedule with valid parameters.

Each strategy draws a pair: the schedule and its documented value at step 0.
"""

from __future__ import annotations

from hypothesis import strategies as st

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
    WarmupStableDecay,
)

values = st.floats(-10.0, 10.0, allow_nan=False, allow_infinity=False)
positive = st.floats(1e-6, 10.0)
unit = st.floats(0.0, 1.0)
lengths = st.integers(1, 10_000)
dtypes = st.sampled_from(["float64", "float32"])


@st.composite
def exponential(draw: st.DrawFn) -> ExponentialDecay:
    initial = draw(positive)
    floor = draw(st.none() | st.floats(0.0, initial))
    return ExponentialDecay(
        initial,
        draw(lengths),
        draw(st.floats(0.01, 1.0)),
        staircase=draw(st.booleans()),
        begin=draw(st.integers(0, 1000)),
        end_value=floor,
        dtype=draw(dtypes),
    )


@st.composite
def piecewise(draw: st.DrawFn) -> PiecewiseConstant:
    bounds = sorted(draw(st.sets(st.integers(1, 10**6), max_size=5)))
    levels = draw(st.lists(values, min_size=len(bounds) + 1, max_size=len(bounds) + 1))
    return PiecewiseConstant(tuple(bounds), tuple(levels), dtype=draw(dtypes))


@st.composite
def warmup_stable_decay(draw: st.DrawFn) -> WarmupStableDecay:
    w, d = draw(st.integers(0, 1000)), draw(st.integers(1, 1000))
    return WarmupStableDecay(
        draw(positive),
        w + d + draw(st.integers(0, 1000)),
        w,
        d,
        initial=draw(unit),
        end_value=draw(unit),
        decay_shape=draw(st.sampled_from(["linear", "cosine", "sqrt"])),
        dtype=draw(dtypes),
    )


def _build(cls: type, *args: st.SearchStrategy[object], **kwargs: st.SearchStrategy[object]):
    return st.builds(cls, *args, dtype=dtypes, **kwargs)


SCHEDULES = {
    "constant": _build(Constant, values),
    "linear": _build(Linear, values, values, lengths, begin=st.integers(0, 1000)),
    "exponential_decay": exponential(),
    "natural_exp_decay": _build(
        NaturalExpDecay, positive, lengths, st.floats(0, 5), staircase=st.booleans()
    ),
    "inverse_time_decay": _build(
        InverseTimeDecay, positive, lengths, st.floats(0, 5), staircase=st.booleans()
    ),
    "piecewise_constant": piecewise(),
    "polynomial_decay": _build(
        PolynomialDecay,
        positive,
        lengths,
        end_value=unit,
        power=st.floats(0.1, 5.0),
        cycle=st.booleans(),
        begin=st.integers(0, 1000),
    ),
    "cosine_decay": _build(
        CosineDecay, positive, lengths, alpha=unit, exponent=st.floats(0.1, 5.0)
    ),
    "cosine_decay_restarts": _build(
        CosineDecayRestarts,
        positive,
        lengths,
        t_mul=st.floats(1.0, 4.0),
        m_mul=unit,
        alpha=unit,
    ),
    "linear_cosine_decay": _build(
        LinearCosineDecay,
        positive,
        lengths,
        num_periods=st.floats(0, 5),
        alpha=unit,
        beta=unit,
    ),
    "noisy_linear_cosine_decay": _build(
        NoisyLinearCosineDecay,
        positive,
        lengths,
        initial_variance=unit,
        variance_decay=unit,
        seed=st.integers(0, 2**32),
    ),
    "one_cycle": _build(
        OneCycle,
        positive,
        st.integers(2, 10_000),
        pct_start=st.floats(0.05, 0.95),
        div_factor=st.floats(1.0, 100.0),
        final_div_factor=st.floats(1.0, 1e4),
        shape=st.sampled_from(["cosine", "linear"]),
    ),
    "inverse_sqrt": _build(InverseSqrt, positive, lengths),
    "warmup_stable_decay": warmup_stable_decay(),
}

any_schedule = st.one_of(*SCHEDULES.values())
steps = st.integers(0, 2**63 - 1) | st.integers(0, 20_000)
