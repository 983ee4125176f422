"""Randomised differential test of globalstep.compat.tf against TensorFlow's own
``tf.compat.v1.train`` decays, bit for bit.

Hypothesis draws each decay's arguments over their whole domain (ints and fractions,
Python floats, float32 and float64, staircase and cycle, t_mul of 1 and not, empty and
single-element lists), and for each configuration the steps at and around every boundary,
float and negative steps, NumPy steps and very large ones. TF is called as eager training
calls it, one scalar step at a time. Where TF returns a value ours returns the same bits
(its dtype too, for values()); where TF raises, ours raises the same built-in type, except
for TF's own InvalidArgumentError/TypeError at the first call (an int learning rate, a
float64 one in the cosine decays), which ours raises as ConfigError at construction.

The derandomised CI run draws ``CI_EXAMPLES`` configurations per decay (about 30 s of CPU
in all); the slow mark draws ``SLOW_EXAMPLES`` (60, or GLOBALSTEP_TF_DIFF_EXAMPLES). The
last test prints the counts compared.
"""

from __future__ import annotations

import math
import os
import warnings
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from globalstep import ConfigError
from globalstep.compat import tf as ctf
from globalstep.compat._common import CompatDifferenceWarning

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

CI_EXAMPLES = 15
# About 15 s of CPU per decay on a quiet machine; GLOBALSTEP_TF_DIFF_EXAMPLES=N for longer.
SLOW_EXAMPLES = int(os.environ.get("GLOBALSTEP_TF_DIFF_EXAMPLES", "60"))
COUNTS: Counter[str] = Counter()

DECAYS = [
    "exponential_decay",
    "natural_exp_decay",
    "inverse_time_decay",
    "polynomial_decay",
    "cosine_decay",
    "cosine_decay_restarts",
    "linear_cosine_decay",
    "noisy_linear_cosine_decay",
]


@pytest.fixture(scope="module")
def tf():
    """TensorFlow, imported once for the module."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pytest.importorskip("tensorflow")


# -- strategies ------------------------------------------------------------------------
def numbers(low: float, high: float, *, ints: bool = False) -> st.SearchStrategy[Any]:
    """A Python float, a float32 or a float64 in [low, high] (and ints if ``ints``).

    No value that is subnormal in float32 or float64: TF flushes subnormals to zero on its
    worker threads and not on the calling thread, so for such a rate TF's own answer depends
    on the thread that ran the op (a rate of 2.2e-311 gave inf in one process and nan in the
    full test run; 1.4e-45, subnormal once TF makes it a float32, likewise).
    """
    floats = st.floats(low, high, allow_nan=False, allow_infinity=False).filter(
        lambda v: v == 0 or abs(v) >= float(np.finfo(np.float32).tiny)
    )
    out = floats | floats.map(np.float32) | floats.map(np.float64)
    if ints:
        out = out | st.integers(math.ceil(low), math.floor(high))
    return out


rates = numbers(-2.0, 2.0) | st.sampled_from([0.1, 1.0, 0.0, np.float64(0.1)]) | st.integers(0, 3)
lengths = st.integers(1, 10**6) | st.floats(0.25, 1e5, allow_nan=False) | st.sampled_from([1, 3])

ARGUMENTS: dict[str, dict[str, st.SearchStrategy[Any]]] = {
    "exponential_decay": {
        "decay_steps": lengths,
        "decay_rate": numbers(0.0, 2.0, ints=True),
        "staircase": st.booleans(),
    },
    "natural_exp_decay": {
        "decay_steps": lengths,
        "decay_rate": numbers(0.0, 3.0, ints=True),
        "staircase": st.booleans(),
    },
    "inverse_time_decay": {
        "decay_steps": lengths,
        "decay_rate": numbers(0.0, 3.0, ints=True),
        "staircase": st.booleans(),
    },
    "polynomial_decay": {
        "decay_steps": lengths,
        "end_learning_rate": numbers(0.0, 0.1),
        "power": numbers(0.0, 3.0, ints=True),
        "cycle": st.booleans(),
    },
    "cosine_decay": {"decay_steps": lengths, "alpha": numbers(0.0, 1.0)},
    "cosine_decay_restarts": {
        "first_decay_steps": lengths,
        "t_mul": st.sampled_from([1.0, 2.0, 1.5]) | numbers(0.5, 3.0),
        "m_mul": numbers(0.1, 1.5, ints=True),
        "alpha": numbers(0.0, 1.0),
    },
    "linear_cosine_decay": {
        "decay_steps": lengths,
        "num_periods": numbers(0.0, 4.0, ints=True),
        "alpha": numbers(0.0, 1.0),
        "beta": numbers(0.0, 0.1),
    },
    "noisy_linear_cosine_decay": {
        "decay_steps": lengths,
        "initial_variance": st.just(0.0),  # no noise: TF's unseeded draws are not comparable
        "num_periods": numbers(0.0, 4.0),
        "alpha": numbers(0.0, 1.0),
        "beta": numbers(0.0, 0.1),
    },
}

LARGE = [2**31 - 1, 2**31, 2**40, 2**53 + 1, 2**62, -(2**31), -(2**40)]
FIXED = [0, 1, -1, -999, 0.5, -0.5, 1e-3, 7.25, np.int64(5), np.float64(2.75), np.float32(3.5)]


def edges(kwargs: dict[str, Any]) -> list[float]:
    """The steps where a decay's formula changes: multiples of its length, and restarts."""
    length = float(kwargs.get("decay_steps", kwargs.get("first_decay_steps", 1)))
    t_mul = float(kwargs.get("t_mul", 1.0))
    out, start, period = [], 0.0, length
    for k in range(1, 5):
        out.append(k * length)
        start += period
        period *= t_mul
        out.append(start)
    return out


def around(edge: float) -> list[Any]:
    """An edge's neighbours as TF's users pass them: ints either side, floats between."""
    near = [edge - 0.5, edge + 0.5, float(edge)]
    if edge < 2**62:
        whole = math.floor(edge)
        near += [whole - 1, whole, whole + 1, whole + 2]
    return near


def steps_for(kwargs: dict[str, Any], drawn: list[Any]) -> list[Any]:
    """Every step compared for one configuration."""
    steps = [*FIXED, *LARGE, *drawn]
    for edge in edges(kwargs):
        steps += around(edge)
    return steps


extra_steps = st.lists(
    st.integers(-(2**40), 2**40) | st.floats(-1e7, 1e7, allow_nan=False), max_size=6
)


# -- comparison ------------------------------------------------------------------------
def same(ours: Any, theirs: Any, *, signed_zero: bool = True) -> bool:
    """Our Python number equals TF's numpy scalar bit for bit in TF's dtype (NaN = NaN;
    0.0 = -0.0 unless ``signed_zero``)."""
    theirs = np.asarray(theirs)
    mine = np.asarray(ours, dtype=theirs.dtype)
    if theirs.dtype.kind == "f" and np.isnan(theirs) and np.isnan(mine):
        return True
    if not signed_zero and mine == 0 and theirs == 0:
        return True
    return mine.tobytes() == theirs.tobytes()


def tf_outcome(call: Any) -> tuple[str, Any]:
    """('value', numpy scalar) or ('raises', exception type) for a TF call."""
    try:
        return "value", call().numpy()
    except Exception as error:  # any TF error: compared by type
        return "raises", type(error)


def check_raised(theirs: type[BaseException], ours: BaseException) -> None:
    """Ours raised where TF did: the same built-in type, or ConfigError for TF's own."""
    builtin = next(t for t in theirs.__mro__ if t.__module__ == "builtins")
    if builtin in (ValueError, IndexError):
        assert isinstance(ours, builtin), (theirs, ours)
    else:  # InvalidArgumentError, TypeError at TF's first call: refused at construction
        assert isinstance(ours, ConfigError), (theirs, ours)


def ours_for(name: str, lr: Any, kwargs: dict[str, Any]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompatDifferenceWarning)
        return getattr(ctf, name)(lr, 0, **kwargs).schedule


def compare_decay(tf: Any, name: str, lr: Any, kwargs: dict[str, Any], drawn: list[Any]) -> None:
    """Compares one decay configuration at every step; counts what was compared."""
    try:
        theirs = getattr(tf.compat.v1.train, name)(lr, 0, **kwargs).func
    except Exception as error:  # TF fails building it (exp of an int): so must we
        with pytest.raises(ConfigError) as info:
            ours_for(name, lr, kwargs)
        check_raised(type(error), info.value)
        COUNTS[f"{name} refused as TF fails"] += 1
        return
    steps = steps_for(kwargs, drawn)
    try:
        schedule = ours_for(name, lr, kwargs)
    except ConfigError as error:
        outcomes = {tf_outcome(lambda s=s: theirs(s))[0] for s in steps[:3]}
        if outcomes == {"raises"}:
            kind, raised = tf_outcome(lambda: theirs(steps[0]))
            check_raised(raised, error)
            COUNTS[f"{name} refused as TF fails"] += 1
            return
        raise
    COUNTS[f"{name} configurations"] += 1
    # TF caches eager constants by value and -0.0 == 0.0, so a -0.0 argument may come back
    # as a +0.0 TF converted earlier in the process: then the sign of a zero is not compared.
    signed = not any(
        isinstance(v, float | np.floating) and v == 0 and math.copysign(1.0, v) < 0
        for v in (lr, *kwargs.values())
    )
    for step in steps:
        kind, value = tf_outcome(lambda s=step: theirs(s))
        assert kind == "value", (name, lr, kwargs, step, value)
        mine = schedule(step)
        assert same(mine, value, signed_zero=signed), (name, lr, kwargs, step, mine, value)
        COUNTS[f"{name} steps"] += 1
    ints = np.array([s for s in steps if type(s) is int and 0 <= s < 2**63], dtype=np.int64)
    vector = schedule.values(ints)
    assert vector.dtype == np.asarray(theirs(0).numpy()).dtype
    scalars = np.array([schedule(int(s)) for s in ints], dtype=vector.dtype)
    assert scalars.tobytes() == vector.tobytes()


def decay_case(name: str) -> st.SearchStrategy[tuple[Any, dict[str, Any], list[Any]]]:
    return st.tuples(rates, st.fixed_dictionaries(ARGUMENTS[name]), extra_steps)


def run_decay(tf: Any, name: str, examples: int) -> None:
    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=decay_case(name))
    def check(case: tuple[Any, dict[str, Any], list[Any]]) -> None:
        lr, kwargs, drawn = case
        compare_decay(tf, name, lr, kwargs, drawn)

    check()


@pytest.mark.parametrize("name", DECAYS)
def test_decay_equals_tensorflow(tf, name):
    """Every drawn configuration of the decay gives TF's bits at every step, or TF's error."""
    run_decay(tf, name, CI_EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("name", DECAYS)
def test_decay_equals_tensorflow_at_length(tf, name):
    """As the CI run, with SLOW_EXAMPLES configurations per decay."""
    run_decay(tf, name, SLOW_EXAMPLES)


def test_polynomial_cycle_at_a_float64_rate_divides_by_decay_steps_itself(tf):
    """polynomial_decay(cycle=True) at a float64 rate gives TF's bits where dividing by the
    float32 cast of ``decay_steps`` would count one cycle more (compat.keras once did)."""
    step, decay_steps = 21_646_772, 1.50530008
    assert np.ceil(step / decay_steps) != np.ceil(step / float(np.float32(decay_steps)))
    kwargs = {"decay_steps": decay_steps, "cycle": True}
    compare_decay(tf, "polynomial_decay", np.float64(0.1), kwargs, [step, float(step)])


def test_a_subnormal_hyper_parameter_is_read_as_zero(tf):
    """cosine_decay(alpha=1e-40) gives TF's 0 at the end (TF reads the subnormal as zero)."""
    compare_decay(tf, "cosine_decay", 1e20, {"decay_steps": 10, "alpha": 1e-40}, [10, 5])


# -- piecewise_constant ------------------------------------------------------------------
scalars = (
    st.integers(-(10**6), 10**6)
    | st.floats(-1e6, 1e6, allow_nan=False).map(lambda f: round(f, 2))
    | st.integers(-(10**6), 10**6).map(np.int64)
    | st.floats(-1e6, 1e6, allow_nan=False).map(np.float64)
    | st.integers(2**31, 2**40)
)
piece_values = (
    st.floats(-1.0, 1.0, allow_nan=False) | st.integers(0, 5) | st.floats(0.0, 1.0).map(np.float64)
)


@st.composite
def piecewise_cases(draw: Any) -> tuple[list[Any], list[Any], list[Any]]:
    """Boundaries (0 to 5, increasing, of one kind or mixed), values, and extra steps."""
    kind = draw(st.sampled_from(["int", "int", "float", "int64", "float64", "mixed"]))
    raw = sorted(set(draw(st.lists(st.integers(-1000, 10**6), max_size=5))))
    convert = {
        "int": int,
        "float": lambda b: b + 0.5,
        "int64": np.int64,
        "float64": lambda b: np.float64(b + 0.25),
    }
    if kind == "mixed":
        boundaries = [convert[draw(st.sampled_from(list(convert)))](b) for b in raw]
    else:
        boundaries = [convert[kind](b) for b in raw]
    one = draw(piece_values)
    same_kind = draw(st.sampled_from([True, True, True, False]))
    values = [
        type(one)(draw(piece_values)) if same_kind else draw(piece_values)
        for _ in range(len(boundaries) + 1)
    ]
    steps = draw(st.lists(scalars, max_size=6))
    return boundaries, values, steps


def compare_piecewise(tf: Any, boundaries: list[Any], values: list[Any], steps: list[Any]) -> None:
    """For each x, TF's piecewise_constant(x, ...)() and ours: same bits or same error type."""
    xs = list(steps)
    for b in boundaries:
        xs += [b, b - 1, b + 1] if not isinstance(b, float | np.floating) else [b, b - 0.5, b + 0.5]
        xs += [int(b), float(b)]
    xs += [-999, 0, 2**40]
    for x in xs:
        kind, theirs = tf_outcome(
            lambda x=x: tf.compat.v1.train.piecewise_constant(x, boundaries, values)()
        )
        if kind == "value":
            theirs = np.asarray(theirs)
        if kind == "raises":
            with pytest.raises((ConfigError, IndexError)) as info:
                ctf.piecewise_constant(x, boundaries, values)()
            check_raised(theirs, info.value)
            COUNTS["piecewise_constant errors matched"] += 1
            continue
        ours = ctf.piecewise_constant(x, boundaries, values)()
        # TF caches eager constants by value, and 0.0 == -0.0: a piecewise value of 0.0
        # comes back as whichever zero TF converted first in the process (history, not
        # the arguments), so the sign of a zero value is not compared.
        assert same(ours, theirs, signed_zero=False), (x, boundaries, values, ours, theirs)
        COUNTS["piecewise_constant steps"] += 1


def run_piecewise(tf: Any, examples: int) -> None:
    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=piecewise_cases())
    def check(case: tuple[list[Any], list[Any], list[Any]]) -> None:
        COUNTS["piecewise_constant configurations"] += 1
        compare_piecewise(tf, *case)

    check()


def test_piecewise_equals_tensorflow(tf):
    """piecewise_constant gives TF's value, dtype or error for every drawn x and list."""
    run_piecewise(tf, CI_EXAMPLES * 3)


@pytest.mark.slow
def test_piecewise_equals_tensorflow_at_length(tf):
    """As the CI run, with SLOW_EXAMPLES configurations."""
    run_piecewise(tf, SLOW_EXAMPLES)


def test_zz_report_counts(tf, capsys):
    """Prints the configurations and steps compared in this session (the module's last test)."""
    if not COUNTS:
        pytest.skip("no differential test ran in this session")
    assert all(v > 0 for v in COUNTS.values())
    lines = [f"  {k}: {v}" for k, v in sorted(COUNTS.items())]
    with capsys.disabled():
        print("\ncompat.tf differential test vs TensorFlow, 0 mismatches:\n" + "\n".join(lines))
        print("deliberate differences from TensorFlow:\n  - " + "\n  - ".join(DELIBERATE))


DELIBERATE = [
    "noisy_linear_cosine_decay draws seeded noise, a pure function of (seed, step) (TF: "
    "unseeded), warned",
    "an int learning rate, or a float64 one in the cosine decays: ConfigError at "
    "construction (TF fails at the first call)",
    "piecewise boundaries must increase and be at least one: ConfigError (an IndexError "
    "where TF raises IndexError) at construction, where TF fails at a call",
    "a subnormal intermediate of plain arithmetic is not flushed (TF flushes it)",
    "not compared: a zero's sign where an argument is -0.0 (TF's eager constant cache "
    "returns whichever zero it converted first); subnormal rates (TF's flush depends on "
    "the thread that ran the op)",
]
