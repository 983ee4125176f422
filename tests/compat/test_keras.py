"""Tests for globalstep.compat.keras: Keras 3's schedules, Keras' names and numbers.

Parity is against keras 3 with its default backend here, tensorflow (asserted below),
called with one int step at a time as an optimizer calls it; it must be bit for bit.
"""

from __future__ import annotations

import math
import os
import re
import types
import warnings

import numpy as np
import pytest

from globalstep import ConfigError, StepError
from globalstep.compat import keras as ck

from .parity import max_ulp, parity_steps

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


@pytest.fixture(scope="module")
def keras():
    """Keras 3, imported once for the module, on the tensorflow backend."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        keras = pytest.importorskip("keras")
    assert keras.backend.backend() == "tensorflow"
    return keras


CASES = [
    ("ExponentialDecay", (0.1, 1000, 0.96), {}, 1000),
    ("ExponentialDecay", (0.1, 1000, 0.5), {"staircase": True}, 1000),
    ("PiecewiseConstantDecay", ([100, 200, 3000], [1.0, 0.5, 0.1, 0.01]), {}, 100),
    ("PolynomialDecay", (0.1, 1000), {}, 1000),
    ("PolynomialDecay", (0.1, 100, 0.01, 2.0, True), {}, 100),
    ("InverseTimeDecay", (0.1, 100, 0.5), {"staircase": True}, 100),
    ("InverseTimeDecay", (0.1, 100, 0.5), {}, 100),
    ("CosineDecay", (0.1, 1000), {"alpha": 0.1}, 1000),
    ("CosineDecay", (0.0, 1000), {"warmup_target": 0.1, "warmup_steps": 100}, 100),
    ("CosineDecayRestarts", (0.1, 100), {"t_mul": 2.0, "m_mul": 0.5, "alpha": 0.01}, 100),
    ("CosineDecayRestarts", (0.1, 100), {"t_mul": 1.0, "m_mul": 0.9}, 100),
]
IDS = [
    "exponential",
    "exponential staircase",
    "piecewise",
    "polynomial",
    "polynomial cycle",
    "inverse time staircase",
    "inverse time",
    "cosine",
    "cosine warmup",
    "restarts",
    "restarts t_mul 1",
]


def _edges(name, args, kwargs):
    """Where a schedule changes course besides its period's multiples: the end of a
    warm-up and decay, each restart of a geometric SGDR."""
    if name == "CosineDecay" and "warmup_steps" in kwargs:
        return (kwargs["warmup_steps"] + args[1],)
    if name == "CosineDecayRestarts" and kwargs.get("t_mul", 2.0) != 1.0:
        restarts, start, length = [], 0.0, float(args[1])
        for _ in range(20):
            start += length
            length *= kwargs.get("t_mul", 2.0)
            restarts.append(round(start))
        return tuple(restarts)
    return ()


@pytest.mark.parametrize(("name", "args", "kwargs", "period"), CASES, ids=IDS)
def test_parity_with_keras(keras, name, args, kwargs, period):
    """Each schedule equals Keras' bit for bit at dense, boundary and large steps."""
    theirs = getattr(keras.optimizers.schedules, name)(*args, **kwargs)
    ours = getattr(ck, name)(*args, **kwargs)
    steps = parity_steps([period], boundaries=_edges(name, args, kwargs))
    reference = np.array([np.asarray(theirs(int(s))) for s in steps])
    assert ours.values(steps).dtype == np.float32
    assert max_ulp(ours.values(steps), reference) == 0


@pytest.mark.parametrize(("name", "args", "kwargs", "period"), CASES, ids=IDS)
def test_get_config_equals_keras(keras, name, args, kwargs, period):
    """get_config() returns what Keras' returns, and from_config() rebuilds an equal one."""
    theirs = getattr(keras.optimizers.schedules, name)(*args, **kwargs).get_config()
    ours = getattr(ck, name)(*args, **kwargs)
    assert ours.get_config() == theirs
    assert type(ours).from_config(theirs) == ours


def test_values_equal_call():
    """values() equals calling one step at a time."""
    lr = ck.CosineDecayRestarts(0.1, 10)
    steps = np.arange(100)
    assert lr.values(steps).tolist() == [lr(int(s)) for s in steps]


def test_piecewise_changes_one_step_after_the_boundary():
    """As in Keras, the next value starts at boundary + 1."""
    lr = ck.PiecewiseConstantDecay([10], [1.0, 2.0])
    assert (lr(10), lr(11)) == (1.0, 2.0)


def test_float64_rate_computes_in_float64():
    """A float64 initial rate computes in float64, as Keras does."""
    assert ck.ExponentialDecay(np.float64(0.1), 10, 0.5).values([1]).dtype == np.float64


def test_repr_names_the_arguments():
    """repr shows the class and its arguments."""
    assert repr(ck.InverseTimeDecay(0.1, 10, 0.5)).startswith(
        "InverseTimeDecay(initial_learning_rate=0.1, decay_steps=10"
    )


@pytest.mark.parametrize(("step", "shown"), [(None, "None"), ("3", "'3'"), (2**63, str(2**63))])
def test_invalid_step(step, shown):
    """A step that is not a number (or past int64) is refused, showing the step received."""
    with pytest.raises(StepError, match=f"`step` must .*; got step={shown}"):
        ck.ExponentialDecay(0.1, 10, 0.5)(step)


def test_negative_and_float_steps_are_accepted_as_in_keras():
    """A negative or fractional step gives the formula's value there, as Keras does."""
    lr = ck.ExponentialDecay(1.0, 10, 0.5)
    assert (lr(-10), lr(5.0), lr(np.float64(5))) == (2.0, lr(5), lr(5))


def test_unsorted_boundaries_warn_and_add_like_keras():
    """Boundaries that do not increase warn, and a step in two ranges gets both values."""
    with pytest.warns(ck.KerasDifferenceWarning, match="do not increase"):
        lr = ck.PiecewiseConstantDecay([20, 10], [1.0, 2.0, 4.0])
    assert lr(15) == 5.0


def test_empty_boundaries_raise_index_error_when_called():
    """No boundaries: built as in Keras, and calling raises IndexError saying what to do."""
    lr = ck.PiecewiseConstantDecay([], [1.0])
    with pytest.raises(IndexError, match="at least one boundary"):
        lr(0)


def test_int_values_give_ints_as_in_keras():
    """Python int values give int32 results, as Keras' tensors of them are int32."""
    lr = ck.PiecewiseConstantDecay([10], [1, 2])
    assert (lr(10), lr(11), lr.values([11]).dtype) == (1, 2, np.int32)


def test_int_initial_rate_warns():
    """An int initial rate warns that compat computes in float32 where Keras uses int32."""
    with pytest.warns(ck.KerasDifferenceWarning, match=r"initial_learning_rate=1\.0"):
        assert ck.ExponentialDecay(1, 10, 0.5)(10) == 0.5


def test_zero_length_warmup_warns_nothing():
    """warmup_steps=0 computes the decay without NumPy's divide-by-zero warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lr = ck.CosineDecay(0.0, 100, warmup_target=1.0, warmup_steps=0)
        assert (lr(0), lr.values([0, 1]).tolist()[0]) == (1.0, 1.0)


@pytest.mark.parametrize(
    ("call", "parameter", "value"),
    [
        (lambda: ck.ExponentialDecay(0.1, 0, 0.5), "decay_steps", "0"),
        (lambda: ck.CosineDecay(0.1, -3), "decay_steps", "-3"),
        (lambda: ck.CosineDecay(0.1, 10, warmup_steps=-1), "warmup_steps", "-1"),
        (lambda: ck.PolynomialDecay(float("nan"), 10), "initial_learning_rate", "nan"),
        (lambda: ck.PiecewiseConstantDecay([1, 2], [1.0, 2.0]), "boundaries", r"\[1, 2\]"),
        (lambda: ck.InverseTimeDecay(0.1, 10, float("inf")), "decay_rate", "inf"),
        (lambda: ck.CosineDecayRestarts(0.1, 10, t_mul=-1.0), "t_mul", "-1.0"),
        (lambda: ck.ExponentialDecay(0.1, 10, 0.5, staircase=1), "staircase", "1"),
    ],
    ids=[
        "zero decay",
        "negative decay",
        "negative warmup",
        "NaN rate",
        "count",
        "inf rate",
        "t_mul",
        "staircase",
    ],
)
def test_invalid_parameter(call, parameter, value):
    """An invalid argument raises ConfigError naming it and the value received."""
    with pytest.raises(ConfigError, match=rf"`{parameter}` .*; got {parameter}={value}"):
        call()


@pytest.mark.parametrize(("name", "args", "kwargs", "period"), CASES, ids=IDS)
def test_float64_parity_with_keras(keras, name, args, kwargs, period):
    """With a float64 initial rate each schedule equals Keras' float64 values bit for bit."""
    if name == "PiecewiseConstantDecay":
        args = (args[0], [np.float64(v) for v in args[1]])
    else:
        args = (np.float64(args[0]), *args[1:])
    theirs = getattr(keras.optimizers.schedules, name)(*args, **kwargs)
    ours = getattr(ck, name)(*args, **kwargs)
    steps = parity_steps([period], boundaries=_edges(name, args, kwargs))
    reference = np.array([np.asarray(theirs(int(s))) for s in steps])
    assert ours.values(steps).dtype == reference.dtype == np.float64
    assert ours.values(steps).tolist() == reference.tolist()


KERAS_VALID = {
    "ExponentialDecay": {"initial_learning_rate": 0.1, "decay_steps": 10, "decay_rate": 0.5},
    "PolynomialDecay": {"initial_learning_rate": 0.1, "decay_steps": 10, "power": 2.0},
    "InverseTimeDecay": {"initial_learning_rate": 0.1, "decay_steps": 10, "decay_rate": 0.5},
    "CosineDecay": {"initial_learning_rate": 0.1, "decay_steps": 10, "warmup_target": 0.2},
    "CosineDecayRestarts": {"initial_learning_rate": 0.1, "first_decay_steps": 10},
    "PiecewiseConstantDecay": {"boundaries": [10], "values": [1.0, 0.5]},
}


def _sweep() -> list[tuple[str, str, object]]:
    """(schedule, parameter, bad value): 0 and -1 for lengths, NaN and inf for numbers, a
    NaN boundary and an inf value for the piecewise decay."""
    cases: list[tuple[str, str, object]] = []
    for name, valid in KERAS_VALID.items():
        arguments = getattr(ck, name).__init__.__code__.co_varnames
        for field in (*valid, "alpha", "m_mul", "end_learning_rate"):
            if field not in arguments:
                continue
            if field.endswith("decay_steps"):
                cases += [(name, field, 0), (name, field, -1)]
            elif field == "boundaries":
                cases.append((name, field, [math.nan]))
            elif field == "values":
                cases.append((name, field, [1.0, math.inf]))
            else:
                cases += [(name, field, math.nan), (name, field, math.inf)]
    return cases


def test_sweep_covers_every_schedule():
    """The sweep below builds every Keras-compat schedule."""
    schedules = [
        n
        for n in ck.__all__
        if isinstance(getattr(ck, n), type) and issubclass(getattr(ck, n), ck._KerasSchedule)
    ]
    assert sorted(KERAS_VALID) == sorted(schedules)


@pytest.mark.parametrize(("name", "field", "bad"), _sweep(), ids=str)
def test_every_parameter_refuses_zero_nan_inf(name, field, bad):
    """Every length refuses 0 and negatives and every number NaN and inf, naming both."""
    shown = re.escape(repr(bad[-1] if isinstance(bad, list) else bad))
    with pytest.raises(ConfigError, match=rf"`{field}` .*; got {field}={shown}\."):
        getattr(ck, name)(**{**KERAS_VALID[name], field: bad})


@pytest.mark.parametrize(
    ("name", "kwargs", "step"),
    [
        ("ExponentialDecay", {"decay_steps": 100, "decay_rate": 0.999, "staircase": True}, 7761976),
        (
            "PolynomialDecay",
            {"decay_steps": 100, "end_learning_rate": 0.01, "power": 0.5, "cycle": True},
            268,
        ),
        (
            "CosineDecayRestarts",
            {"first_decay_steps": 12345, "t_mul": 1.5, "m_mul": 0.9, "alpha": 0.01},
            1864112,
        ),
    ],
    ids=["powf", "powf of a cycle", "logf and cosf"],
)
def test_parity_where_rounding_from_float64_differs(keras, name, kwargs, step):
    """Where the C library's float32 function is not the once-rounded float64 value (found
    by random search), the schedule still equals Keras' bit for bit."""
    lr = {"ExponentialDecay": 0.1, "PolynomialDecay": 0.0003}.get(name, 0.05)
    theirs = getattr(keras.optimizers.schedules, name)(lr, **kwargs)(step)
    assert getattr(ck, name)(lr, **kwargs)(step) == np.asarray(theirs).item()


@pytest.mark.parametrize(("initial", "step"), [(0.1, 125452), (0.0003, 9113345)])
def test_subnormal_rates_flush_to_zero_as_in_keras(keras, initial, step):
    """A rate below float32's smallest normal number is 0, as TensorFlow flushes it."""
    kwargs = {"decay_steps": 100 if initial < 0.1 else 1000, "staircase": initial < 0.1}
    rate = 0.999 if initial < 0.1 else 0.5
    theirs = keras.optimizers.schedules.ExponentialDecay(initial, decay_rate=rate, **kwargs)
    ours = ck.ExponentialDecay(initial, decay_rate=rate, **kwargs)
    assert np.asarray(theirs(step)).item() == 0.0
    assert ours(step) == 0.0
    assert ours.values([step]).tolist() == [0.0]


def test_subnormal_rate_is_zero_without_keras():
    """A float32 rate that would be subnormal is 0 (TensorFlow's flush-to-zero), in both
    __call__ and values()."""
    lr = ck.ExponentialDecay(0.1, 1000, 0.5)
    assert np.float32(0.1) * np.float32(0.5) ** np.float32(125.452) != 0  # subnormal
    assert (lr(125452), lr.values([125452]).tolist()) == (0.0, [0.0])


def test_without_the_c_library_pow_is_rounded_from_float64(monkeypatch):
    """Where the C library cannot be loaded, pow comes from float64, within one ulp."""
    from globalstep.compat import _common

    with_libm = ck.ExponentialDecay(0.1, 100, 0.999, staircase=True).values([7761976])
    monkeypatch.setattr(_common, "_FLOAT32", {})
    without = ck.ExponentialDecay(0.1, 100, 0.999, staircase=True).values([7761976])
    assert max_ulp(with_libm, without) <= 1


def test_float64_overflow_is_inf_and_a_negative_base_nan():
    """In float64, pow past the range is inf and a negative rate's fractional power NaN,
    as Keras' float64 kernels give, where Python's math.pow would raise."""
    assert ck.ExponentialDecay(np.float64(0.1), 1, 10.0)(400) == math.inf
    assert math.isnan(ck.ExponentialDecay(np.float64(0.1), 10, -0.5)(5))


def test_equal_schedules_hash_alike():
    """Two schedules with equal arguments are equal and hash alike; others differ."""
    a, b = ck.ExponentialDecay(0.1, 10, 0.5), ck.ExponentialDecay(0.1, 10, 0.5)
    assert a == b
    assert len({a, b}) == 1
    assert a != ck.ExponentialDecay(0.1, 10, 0.25)
    assert a != ck.InverseTimeDecay(0.1, 10, 0.5)


def test_without_libm_float32_functions_are_rounded_from_float64(monkeypatch):
    """Where no C library loads, or one lacks a float32 function, none is used."""
    import ctypes

    from globalstep.compat import _common

    def no_library(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(_common, "_FLOAT32", None)
    monkeypatch.setattr(ctypes, "CDLL", no_library)
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    assert _common._libm_float32() == {}

    def stub(*args: float) -> float:
        return 0.0

    without_cosf = types.SimpleNamespace(powf=stub, expf=stub, logf=stub)
    monkeypatch.setattr(_common, "_FLOAT32", None)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: without_cosf)
    assert _common._libm_float32() == {}


def test_a_call_looks_up_no_dtype_limits(monkeypatch):
    """The per-step call reuses the limits found at construction (np.finfo/np.iinfo are slow)."""
    lr = ck.ExponentialDecay(0.1, 1000, 0.96)
    expected = lr(5)

    def looked_up(*args):
        raise AssertionError("a dtype's limits were looked up on the per-step path")

    monkeypatch.setattr(np, "finfo", looked_up)
    monkeypatch.setattr(np, "iinfo", looked_up)
    assert lr(5) == expected
    assert lr.values([5]).tolist() == [expected]


def test_refused_t_mul_gives_nan_in_keras(keras):
    """Why t_mul <= 0 is refused: Keras' SGDR with t_mul=-1 returns NaN after step 0."""
    theirs = keras.optimizers.schedules.CosineDecayRestarts(0.1, 10, t_mul=-1.0)
    assert math.isnan(np.asarray(theirs(15)).item())
    with pytest.raises(ConfigError, match="`t_mul` must be > 0"):
        ck.CosineDecayRestarts(0.1, 10, t_mul=-1.0)


def test_refused_negative_warmup_decays_before_step_0_in_keras(keras):
    """Why warmup_steps < 0 is refused: Keras' rate at step 0 is then already decayed."""
    theirs = keras.optimizers.schedules.CosineDecay(0.1, 10, warmup_target=0.2, warmup_steps=-5)
    assert np.asarray(theirs(0)).item() < 0.2
    with pytest.raises(ConfigError, match="`warmup_steps` must be >= 0"):
        ck.CosineDecay(0.1, 10, warmup_target=0.2, warmup_steps=-5)
