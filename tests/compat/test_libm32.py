"""Tests for globalstep.compat._libm32: glibc's cosf and logf on whole arrays, bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest

from globalstep.compat import _common, _libm32
from globalstep.compat._common import F32Ops, _libm_float32, libm_is_glibc

LIBM = _libm_float32()
UFUNC = {"cosf": np.cos, "logf": np.log}


def _glibc(name: str) -> np.ufunc:
    """The C library's ``name``, or a skip where it is not glibc's algorithm."""
    libm = LIBM.get(UFUNC[name])
    if libm is None or not libm_is_glibc(name, libm):
        pytest.skip(f"the C library's {name} is not glibc's algorithm here")
    return libm


def _c(libm: np.ufunc, args: np.ndarray) -> np.ndarray:
    """The C library's function on every element, as float32."""
    with np.errstate(all="ignore"):
        return np.asarray(libm(args), dtype=np.float32)


def _bits(values: np.ndarray) -> np.ndarray:
    """The float32 bit patterns, with every NaN the same (their payloads are not compared)."""
    bits = values.view(np.uint32).copy()
    bits[np.isnan(values)] = 0x7FC00000
    return bits


def _arguments(name: str) -> np.ndarray:
    """Random float32 arguments over the whole range: uniform around zero, every exponent
    (random bit patterns, NaN and infinity included), and the edges of glibc's branches."""
    rng = np.random.default_rng(11)
    edges = [0.0, -0.0, 2**-12, 0.75, 120.0, 1.0, math.pi / 2, math.pi, 1e-45, 3e38]
    return np.concatenate(
        [
            rng.uniform(-130.0, 130.0, 100_000).astype(np.float32),
            rng.uniform(0.5, 2.0, 50_000).astype(np.float32),
            rng.integers(0, 2**32, 100_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
            np.array(edges + [-e for e in edges], dtype=np.float32),
            np.nextafter(np.float32(edges), np.float32(np.inf)),
            np.array([np.inf, -np.inf, np.nan], dtype=np.float32),
        ]
    )


@pytest.mark.parametrize("name", ["cosf", "logf"])
def test_vectorised_equals_the_c_library_on_random_arguments(name):
    """On 250,000 arguments of every range the vectorised function gives the C library's bits."""
    libm = _glibc(name)
    args = _arguments(name)
    theirs = _c(libm, args)
    ours = _libm32.vectorised(name, args, libm)
    assert np.array_equal(_bits(ours), _bits(theirs))


@pytest.mark.parametrize("name", ["cosf", "logf"])
def test_an_array_of_only_special_arguments_gives_the_c_librarys_values(name):
    """NaN, infinities (and for logf zero and negatives) alone in an array, none in range."""
    libm = _glibc(name)
    args = np.array([np.nan, np.inf, -np.inf, 0.0, -1.0, 1e38, -3e38] * 20, dtype=np.float32)
    if name == "cosf":
        args = args[~np.isfinite(args)]
        args = np.concatenate([args] * 3)
    assert np.array_equal(_bits(_libm32.vectorised(name, args, libm)), _bits(_c(libm, args)))


@pytest.mark.slow
def test_cosf_equals_the_c_library_on_every_step_of_a_cosine_decay():
    """cos(pi * k / 10**6) in float32 for all 10**6 steps k (the peers' cosine decays)."""
    libm = _glibc("cosf")
    fraction = np.arange(10**6, dtype=np.int64).astype(np.float32) / np.float32(10**6)
    args = np.float32(math.pi) * fraction
    assert np.array_equal(_bits(_libm32.vectorised("cosf", args, libm)), _bits(_c(libm, args)))


@pytest.mark.slow
def test_logf_equals_the_c_library_on_every_step_of_a_restart_schedule():
    """log(1 + k / 1000) in float32 for all 10**6 steps k (SGDR's restart count, t_mul=2)."""
    libm = _glibc("logf")
    args = np.float32(1) + np.arange(10**6, dtype=np.int64).astype(np.float32) / np.float32(1000)
    assert np.array_equal(_bits(_libm32.vectorised("logf", args, libm)), _bits(_c(libm, args)))


@pytest.mark.parametrize("name", ["cosf", "logf"])
def test_results_near_a_rounding_boundary_come_from_the_c_library(name, monkeypatch):
    """Where the float64 value is too near a rounding boundary, the C library's value is used."""
    kernel, _, _ = _libm32.KERNELS[name]
    monkeypatch.setitem(_libm32.KERNELS, name, (kernel, 0.0, 1.0))  # nothing is far enough
    marker = np.frompyfunc(lambda v: np.float32(7.0), 1, 1)
    out = _libm32.vectorised(name, np.linspace(1, 2, 100, dtype=np.float32), marker)
    assert out.tolist() == [7.0] * 100


@pytest.mark.parametrize("name", ["cosf", "logf"])
def test_a_c_library_of_another_algorithm_is_detected(name):
    """A correctly rounded cos/log (not glibc's algorithm) is not taken for glibc's."""
    exact = math.cos if name == "cosf" else (lambda v: math.log(v) if v > 0 else math.nan)
    other = np.frompyfunc(lambda v: np.float32(exact(float(v))), 1, 1)
    assert not libm_is_glibc(name, other)


def test_ops_call_the_c_library_per_element_where_it_is_not_glibc(monkeypatch):
    """F32Ops.cos calls the C library element by element where the glibc check fails."""
    libm = _glibc("cosf")
    monkeypatch.setitem(_common._GLIBC, ("cosf", libm), False)
    calls = []
    counting = np.frompyfunc(lambda v: calls.append(v) or libm(v), 1, 1)
    ops = F32Ops(np.float32)
    monkeypatch.setitem(ops._libm32, np.cos, counting)
    monkeypatch.setitem(_common._GLIBC, ("cosf", counting), False)
    monkeypatch.setitem(_common._NUMPY_IS_LIBM, (np.cos, "float32"), False)
    args = np.linspace(0, 3, 1000, dtype=np.float32)
    out = ops.cos(args)
    assert len(calls) == 1000
    assert np.array_equal(_bits(out), _bits(_c(libm, args)))


def test_powf_of_one_is_the_base_on_a_million_bases_in_zero_one():
    """powf(x, 1) == x for every 997th float32 of [0, 1] (the cosine factors optax raises to 1)."""
    powf = LIBM.get(np.power)
    if powf is None or not _common.libm_pow_one_is_identity(powf):
        pytest.skip("no C library powf with powf(x, 1) == x here")
    bases = np.arange(0, 0x3F800001, 997, dtype=np.uint32).view(np.float32)
    ones = np.ones(bases.shape, np.float32)
    if _common.numpy_is_libm(np.power, np.float32, powf):
        out = np.power(bases, ones)  # NumPy's loop calls powf
    else:  # NumPy's own (SIMD) power: the C library's, element by element
        out = np.asarray(powf(bases, ones), dtype=np.float32)
    assert out.tobytes() == bases.tobytes()


def test_ops_pow_of_one_skips_powf_and_equals_it(monkeypatch):
    """F32Ops.pow(x, 1) returns x (flushed) without calling powf, equal to powf's bits."""
    powf = LIBM.get(np.power)
    if powf is None or not _common.libm_pow_one_is_identity(powf):
        pytest.skip("no C library powf with powf(x, 1) == x here")
    rng = np.random.default_rng(5)
    bases = rng.uniform(0, 1, 10_000).astype(np.float32)
    ops = F32Ops(np.float32)
    expected = np.asarray(powf(bases, np.ones(bases.shape, np.float32)), dtype=np.float32)
    calls = []
    counting = np.frompyfunc(lambda b, e: calls.append(b) or powf(b, e), 2, 1)
    monkeypatch.setitem(ops._libm32, np.power, counting)
    monkeypatch.setitem(_common._POW_ONE, counting, True)
    out = ops.pow(bases, np.float32(1.0))
    assert out.tobytes() == expected.tobytes()
    assert ops.pow(np.float32([1e-40]), np.float32(1.0)).tolist() == [0.0]  # flushed
    assert calls == []
