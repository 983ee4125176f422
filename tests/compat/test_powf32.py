"""Tests for glibc's powf on whole arrays (compat._libm32.vectorised_pow), bit for bit."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from globalstep.compat import _common, _libm32
from globalstep.compat._common import F32Ops, _libm_float32, libm_is_glibc

POWF = _libm_float32().get(np.power)


@pytest.fixture
def powf() -> np.ufunc:
    """The C library's powf, or a skip where it is not glibc's algorithm."""
    if POWF is None or not libm_is_glibc("powf", POWF):
        pytest.skip("the C library's powf is not glibc's algorithm here")
    return POWF


def _theirs(powf: np.ufunc, x: np.ndarray, y: np.ndarray, flush: bool = False) -> np.ndarray:
    """The C library's powf on every pair, as float32 (subnormals flushed with ``flush``)."""
    with np.errstate(all="ignore"):
        out = np.asarray(powf(*np.broadcast_arrays(x, y)), dtype=np.float32)
    if flush:
        out[np.abs(out) < np.finfo(np.float32).tiny] *= 0
    return out


def _bits(values: np.ndarray) -> np.ndarray:
    """The float32 bit patterns, with every NaN the same (their payloads are not compared)."""
    bits = values.view(np.uint32).copy()
    bits[np.isnan(values)] = 0x7FC00000
    return bits


def _same(ours: np.ndarray, theirs: np.ndarray) -> None:
    differ = np.flatnonzero(_bits(ours) != _bits(theirs))
    assert differ.size == 0, f"{differ.size} differ, first at {differ[:5]}: {ours[differ[:5]]}"


def _random_pairs() -> tuple[np.ndarray, np.ndarray]:
    """Bases and exponents over the whole range: schedule-like, every exponent (random bit
    patterns, NaN and infinity included), and the special values in every combination."""
    rng = np.random.default_rng(23)
    n = 100_000
    special = np.float32(
        [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, np.inf, -np.inf, np.nan, 1e-40, 3.0]
    )
    sx, sy = (a.reshape(-1) for a in np.meshgrid(special, special))
    x = np.concatenate(
        [
            rng.uniform(0.0, 2.0, n).astype(np.float32),
            np.exp(rng.uniform(-80.0, 80.0, n)).astype(np.float32),
            rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32),
            sx,
        ]
    )
    y = np.concatenate(
        [
            rng.uniform(-60.0, 2000.0, n).astype(np.float32),
            rng.uniform(-3.0, 3.0, n).astype(np.float32),
            rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32),
            sy,
        ]
    )
    return x, y


@pytest.mark.parametrize("flush", [False, True])
def test_vectorised_pow_equals_the_c_library_on_random_pairs(powf, flush):
    """On 300,000 pairs of every range and the special values, glibc's bits (flushed or not)."""
    x, y = _random_pairs()
    _same(_libm32.vectorised_pow(x, y, powf, flush=flush), _theirs(powf, x, y, flush))


@pytest.mark.parametrize(
    ("label", "base", "exponent"),
    [
        (
            "exponential decay",
            np.float32(0.96),
            np.arange(10**6, dtype=np.float32) / np.float32(1000),
        ),
        ("to underflow", np.float32(0.5), np.arange(10**6, dtype=np.float32) / np.float32(3000)),
        ("near one", np.float32(0.9999), np.arange(10**6, dtype=np.float32)),
        ("staircase", np.float32(0.5), np.floor(np.arange(10**5, dtype=np.float32) / 20000)),
        ("polynomial", 1 - np.minimum(np.arange(10**6), 10**5).astype(np.float32) / 1e5, 2.0),
        ("root", np.arange(10**6, dtype=np.float32) / np.float32(1e6), np.float32(0.9)),
    ],
)
def test_vectorised_pow_equals_the_c_library_on_every_step_of_a_schedule(
    powf, label, base, exponent
):
    """Every step of decays that reach float32's smallest numbers, stay near 1, hold
    constant (one value per chunk), and polynomials past their end (0 ** 2)."""
    base, exponent = np.float32(base), np.float32(exponent)
    for flush in (False, True):
        ours = _libm32.vectorised_pow(base, exponent, powf, flush=flush)
        _same(ours, _theirs(powf, base, exponent, flush))


def test_flushing_keeps_results_that_round_up_to_the_smallest_normal(powf):
    """Results within half a subnormal step below float32's smallest normal round up to it
    and are kept; the rest below it flush to zero (bases around each crossing of it)."""
    tiny = np.finfo(np.float32).tiny
    xs, ys = [], []
    for exponent in (2, 3, 4, 5, 6, 7, 1.5, 2.5, 1.25, 3.75, 9, 11, 13):
        centre = np.float32(float(tiny) ** (1 / exponent)).view(np.uint32)
        xs.append((centre + np.arange(-2000, 2000)).astype(np.uint32).view(np.float32))
        ys.append(np.full(4000, exponent, np.float32))
    x, y = np.concatenate(xs), np.concatenate(ys)
    theirs = _theirs(powf, x, y)
    assert (theirs == tiny).sum() > 0  # the case is met
    _same(_libm32.vectorised_pow(x, y, powf, flush=True), _theirs(powf, x, y, flush=True))
    _same(_libm32.vectorised_pow(x, y, powf), theirs)


def test_unsure_and_special_results_come_from_the_c_library(powf):
    """The results near a rounding boundary and the special pairs are computed by the C
    library itself, and only those."""
    x, y = _random_pairs()
    calls = []
    counting = np.frompyfunc(lambda a, b: calls.append(a) or powf(a, b), 2, 1)
    ours = _libm32.vectorised_pow(x, y, counting)
    expected = 0
    for start in range(0, x.size, _libm32.CHUNK):
        part = slice(start, start + _libm32.CHUNK)
        expected += int((~_libm32.powf_sure(x[part], y[part])[1]).sum())
    assert len(calls) == expected
    assert 0 < expected < x.size // 2
    _same(ours, _theirs(powf, x, y))


def test_pow_tables_are_their_definitions():
    """log2(c) is -log2(1/c) correctly rounded, next to logf's table; 2 ** (i/32) less
    the exponent step reproduces 2 ** (i/32) bit for bit."""
    log2c, table, high, low = _libm32._powf_tables()
    invc = _libm32._LOGF_INVC
    assert np.array_equal(high + low, invc)
    assert np.abs(log2c + np.log2(invc)).max() < 2**-52
    assert log2c[9] == 0.0  # c = 1
    steps = np.arange(32, dtype=np.uint64) << np.uint64(47)
    for i, value in enumerate((table + steps).view(np.float64).tolist()):
        half = Fraction(math.ulp(value)) / 2  # 2 ** (i/32) lies within half an ulp of value
        assert (Fraction(value) - half) ** 32 < 2**i < (Fraction(value) + half) ** 32


def test_ops_pow_takes_the_vectorised_form_on_arrays(powf, monkeypatch):
    """F32Ops.pow on 64 elements or more uses vectorised_pow (with flushing) where NumPy's
    own power is not the C library's, and its values are the C library's, flushed."""
    monkeypatch.setitem(_common._NUMPY_IS_LIBM, (np.power, "float32"), False)
    calls = []
    real = _libm32.vectorised_pow

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(_common, "vectorised_pow", spy)
    steps = np.arange(5000, dtype=np.float32)
    out = F32Ops(np.float32).pow(np.float32(0.5), steps / np.float32(30))
    assert calls == [{"flush": True}]
    _same(out, _theirs(powf, np.float32(0.5), steps / np.float32(30), flush=True))


def test_a_c_library_of_another_powf_is_detected():
    """A correctly rounded pow (not glibc's algorithm) is not taken for glibc's powf, and
    F32Ops then calls the C library element by element."""

    def exact(a: float, b: float) -> np.float32:
        try:
            return np.float32(float(a) ** float(b)) if a > 0 else np.float32(np.nan)
        except OverflowError:
            return np.float32(np.inf)

    with np.errstate(over="ignore"):
        assert not libm_is_glibc("powf", np.frompyfunc(exact, 2, 1))
