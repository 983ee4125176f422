"""The C library's float32 cosine, logarithm and power (glibc's ``cosf``, ``logf``,
``powf``), bit for bit, on whole arrays.

TensorFlow's kernels on one step and XLA's eager ones call the C library's ``cosf``,
``logf`` and ``powf``; NumPy's float32 ``cos`` and ``log`` (and, on AVX-512 machines,
``power``) are SIMD approximations that differ from them in the last bit on many arguments
(one in six for cos, one in five for power), and calling the C library element by element
through ctypes costs about 1-4 us an element. This module evaluates glibc's
algorithms (glibc 2.28 and later, from Arm's optimized-routines) in NumPy float64.

``cosf`` (``sysdeps/ieee754/flt-32/s_cosf.c``):

1. ``|y| < 2**-12``: 1.
2. ``|y| < 0.75`` (glibc compares the top 12 bits with those of pi/4): the cosine
   polynomial of ``x = y`` (which 3 also gives there).
3. ``|y| < 120``: ``n = round(y * 2/pi)`` (glibc's scaled truncation, reproduced), the
   reduced ``r = y - n * pi/2`` (rounded once, as the FMA build computes it: the product
   is split so that it is exact), and the sine or cosine polynomial of ``r`` by quadrant.
4. Larger finite ``|y|``: glibc's integer reduction with 4/pi to 192 bits (``reduce_large``),
   reproduced with uint64 arithmetic, then as 3.

``logf`` (``sysdeps/ieee754/flt-32/e_logf.c``): ``x = 2**k z`` with ``z`` in
``[0.7, 1.4)``, one of 16 subintervals ``i`` with centre ``c``, and
``log(x) = log1p(z/c - 1) + log(c) + k ln 2`` with a degree-4 polynomial for ``log1p``;
``x = 1`` gives 0, and zero, negative, subnormal, infinite and NaN arguments go to
``logf`` itself.

``powf`` (``sysdeps/ieee754/flt-32/e_powf.c``): ``log2(x)`` as logf's reduction gives it
(the same 16 intervals, ``log2(c)`` for ``log(c)``, a degree-5 polynomial), times ``y``
in float64, then ``2 ** (y log2 x)`` as ``2 ** (k/32)`` from a 32-entry table times a
degree-3 polynomial of the remainder. Both tables are computed here from their
definitions (``-log2(1/c)`` and ``2 ** (i/32)``, correctly rounded); the polynomials'
coefficients are the algorithm's published constants. glibc's special cases that
schedules meet (``0 ** y`` for ``y > 0``, ``x ** 0``, underflow to zero) are computed
here, the others (negative, subnormal, infinite, NaN arguments; overflow) by ``powf``.

The polynomials are evaluated in float64 without fused multiply-adds, where glibc's x86-64
FMA build fuses some of them, so the float64 value before the final rounding to float32
may differ from glibc's by a few units of 2**-53 (relative; for ``powf`` that grows with
``|y log2 x|``, see :data:`_POW_TOLERANCE`). Every result whose float64 value lies within
a tolerance of a float32 rounding boundary (about one argument in ten thousand or fewer)
is therefore recomputed with the C library's own function, as are the
special arguments: every other result rounds to the same float32 as glibc's, whichever of
its builds runs. Whether the C library is this algorithm at all is checked once per
process, on a probe of thousands of arguments, by
:func:`globalstep.compat._common.libm_is_glibc`; elsewhere (musl, macOS, an older glibc)
the C library is called element by element.
"""

from __future__ import annotations

import decimal
import math
import struct
import threading
from typing import Any

import numpy as np

__all__ = [
    "CHUNK",
    "KERNELS",
    "TOLERANCE",
    "cosf_float64",
    "exp2_float64",
    "log2f_float64",
    "logf_float64",
    "powf_float64",
    "powf_sure",
    "sure",
    "vectorised",
    "vectorised_pow",
]


def _hexes(*values: str) -> tuple[float, ...]:
    """glibc's tables, written as its sources write them: C99 hex floats."""
    return tuple(float.fromhex(v) for v in values)


# glibc's __sincosf_table[0] (the coefficients are published constants of its algorithm).
_HPI_INV_2_24 = float.fromhex("0x1.45F306DC9C883p+23")  # 2/pi * 2**24
_HPI = float.fromhex("0x1.921FB54442D18p0")  # pi/2 rounded to float64
_C0 = 1.0
_C1 = float.fromhex("-0x1.ffffffd0c621cp-2")
_C2 = float.fromhex("0x1.55553e1068f19p-5")
_C3 = float.fromhex("-0x1.6c087e89a359dp-10")
_C4 = float.fromhex("0x1.99343027bf8c3p-16")
_S1 = float.fromhex("-0x1.555545995a603p-3")
_S2 = float.fromhex("0x1.1107605230bc4p-7")
_S3 = float.fromhex("-0x1.994eb3774cf24p-13")
_PI63 = float.fromhex("0x1.921FB54442D18p-62")  # 2 pi * 2**-64
# pi/2 split so that n * _HPI_HI is exact (n < 2**7, _HPI_HI has 32 significant bits) and
# y - n * _HPI_HI is exact (Sterbenz): then one rounding of (that - n * _HPI_LO) is the
# correctly rounded y - n * pi/2, what a fused multiply-add gives.
_HPI_HI = struct.unpack(
    "<d", struct.pack("<Q", struct.unpack("<Q", struct.pack("<d", _HPI))[0] & ~0x1FFFFF)
)[0]
_HPI_LO = _HPI - _HPI_HI
# 4/pi to 192 bits, 8 new bits an entry (glibc's __inv_pio4).
_INV_PIO4 = np.array(
    [
        0xA2, 0xA2F9, 0xA2F983, 0xA2F9836E, 0xF9836E4E, 0x836E4E44, 0x6E4E4415, 0x4E441529,
        0x441529FC, 0x1529FC27, 0x29FC2757, 0xFC2757D1, 0x2757D1F5, 0x57D1F534, 0xD1F534DD,
        0xF534DDC0, 0x34DDC0DB, 0xDDC0DB62, 0xC0DB6295, 0xDB629599, 0x6295993C, 0x95993C43,
        0x993C4390, 0x3C439041,
    ],
    dtype=np.uint64,
)  # fmt: skip

CHUNK = 1 << 13
"""Elements computed at a time."""

TOLERANCE = 2.0**-46
"""How far from a float32 rounding boundary a float64 value must be to round as glibc's."""

_BITS_120 = 0x42F00000  # 120.0
_BITS_INF = 0x7F800000


def _cos_poly(x2: Any) -> Any:
    """glibc's cosine polynomial of ``x2 = x * x``, its operations in its order (each sum
    is commutative in IEEE arithmetic, so ``a += b`` is ``b + a``); in place, to spare the
    allocations."""
    x4 = x2 * x2
    c2 = x2 * _C4
    c2 += _C3
    c = x2 * _C1
    c += _C0  # c1
    x4c2 = x4 * _C2
    c += x4c2  # c = c1 + x4 * c2
    x4 *= x2  # x6
    x4 *= c2
    c += x4  # c + x6 * c2
    return c


def _sin_poly(x: Any, x2: Any) -> Any:
    """glibc's sine polynomial of ``x`` (``x2 = x * x``); odd, so that of ``-x`` is exactly
    its negation."""
    x3 = x * x2
    s1 = x2 * _S3
    s1 += _S2
    s = x3 * _S1
    s += x
    x3 *= x2  # x7
    x3 *= s1
    s += x3
    return s


def _reduce_large(bits: Any) -> tuple[Any, Any]:
    """glibc's ``reduce_large`` on ``|y|``'s bits (uint64, ``|y| >= 120``): the reduced
    argument (float64) and the quadrant (int64)."""
    index = (bits >> np.uint64(26)) & np.uint64(15)
    shift = (bits >> np.uint64(23)) & np.uint64(7)
    xi = ((bits & np.uint64(0xFFFFFF)) | np.uint64(0x800000)) << shift
    xi &= np.uint64(0xFFFFFFFF)  # glibc shifts a uint32
    mask32 = np.uint64(0xFFFFFFFF)
    res0 = (xi * _INV_PIO4[index]) & mask32  # a uint32 product
    res1 = xi * _INV_PIO4[index + np.uint64(4)]
    res2 = xi * _INV_PIO4[index + np.uint64(8)]
    res0 = (res2 >> np.uint64(32)) | (res0 << np.uint64(32))
    res0 = res0 + res1  # wraps modulo 2**64, as in C
    n = (res0 + np.uint64(1 << 61)) >> np.uint64(62)
    res0 = res0 - (n << np.uint64(62))
    return res0.view(np.int64).astype(np.float64) * _PI63, n.astype(np.int64)


def cosf_float64(y: Any) -> tuple[Any, Any]:
    """glibc's ``cosf`` on float32 ``y`` before its final rounding: the float64 values and
    a mask of the arguments it does not cover (NaN, infinity)."""
    y = np.asarray(y, dtype=np.float32)
    bits = y.view(np.uint32) & np.uint32(0x7FFFFFFF)
    fast = bits < _BITS_120
    if fast.all():  # the common case (schedules take cos of [0, pi]): no gather, no scatter
        return _fast(y), np.zeros(y.shape, dtype=bool)
    out = np.empty(y.shape, dtype=np.float64)
    if fast.any():
        out[fast] = _fast(y[fast])
    large = ~fast & (bits < _BITS_INF)
    if large.any():
        raw = y[large].view(np.uint32).astype(np.uint64)
        r, n = _reduce_large(raw & np.uint64(0x7FFFFFFF))
        signed = n + (raw >> np.uint64(31)).astype(np.int64)  # the sign joins the signs
        out[large] = _by_quadrant(r, n, signed)
    special = bits >= _BITS_INF
    out[special] = np.nan
    return out, special


def _fast(y: Any) -> Any:
    """glibc's two branches below 120: ``|y| < 0.75`` is the cosine polynomial of ``y``,
    which is what the reduction gives there too (``n = 0``, ``r = y`` exactly), and below
    ``2**-12``, where glibc returns 1, the polynomial rounds to 1 as well."""
    x = y.astype(np.float64)
    t = (x * _HPI_INV_2_24).astype(np.int32)  # C's truncating conversion
    t += np.int32(0x800000)
    t >>= np.int32(24)
    nf = t.astype(np.float64)
    part = nf * _HPI_HI
    x -= part
    nf *= _HPI_LO
    x -= nf
    low, high = int(t.min()), int(t.max())
    if low == high:  # one quadrant (a chunk of a schedule's steps, usually): one polynomial
        return _in_quadrant(x, low)
    n = t.astype(np.int64)
    return _by_quadrant(x, n, n)


def _in_quadrant(r: Any, n: int) -> Any:
    """cos from the reduced argument ``r``, all in quadrant ``n`` (see :func:`_by_quadrant`)."""
    r2 = r * r
    if n & 1:
        out = _sin_poly(r, r2)
        if (n + 1) & 2:
            np.negative(out, out=out)
        return out
    out = _cos_poly(r2)
    if n & 2:
        np.negative(out, out=out)
    return out


def _by_quadrant(r: Any, n: Any, signed: Any) -> Any:
    """cos from the reduced argument ``r`` in quadrant ``n``: the sine polynomial where
    ``n`` is odd, else the cosine's, with glibc's signs taken from ``signed`` (``n`` plus
    the sign bit of a large argument): ``sign[signed & 3]`` on the sine's argument, and
    its table 1 (the cosine negated) where ``signed & 2``. Both polynomials are sign
    symmetric, so a sign is applied to the result."""
    r2 = r * r
    sine = _sin_poly(r, r2)
    np.negative(sine, out=sine, where=((signed + 1) & 2).astype(bool))  # sign: 1,-1,-1,1
    cosine = _cos_poly(r2)
    np.negative(cosine, out=cosine, where=(signed & 2).astype(bool))
    return np.where((n & 1).astype(bool), sine, cosine)


# glibc's __logf_data: (1/c, log c) for 16 subintervals of [0.7, 1.4), a row each as glibc
# writes its table; ln 2, the polynomial.
_LOGF_TABLE = np.array(_hexes(
    "0x1.661ec79f8f3bep+0", "-0x1.57bf7808caadep-2",
    "0x1.571ed4aaf883dp+0", "-0x1.2bef0a7c06ddbp-2",
    "0x1.49539f0f010bp+0", "-0x1.01eae7f513a67p-2",
    "0x1.3c995b0b80385p+0", "-0x1.b31d8a68224e9p-3",
    "0x1.30d190c8864a5p+0", "-0x1.6574f0ac07758p-3",
    "0x1.25e227b0b8eap+0", "-0x1.1aa2bc79c81p-3",
    "0x1.1bb4a4a1a343fp+0", "-0x1.a4e76ce8c0e5ep-4",
    "0x1.12358f08ae5bap+0", "-0x1.1973c5a611cccp-4",
    "0x1.0953f419900a7p+0", "-0x1.252f438e10c1ep-5",
    "0x1p+0", "0x0p+0",
    "0x1.e608cfd9a47acp-1", "0x1.aa5aa5df25984p-5",
    "0x1.ca4b31f026aap-1", "0x1.c5e53aa362eb4p-4",
    "0x1.b2036576afce6p-1", "0x1.526e57720db08p-3",
    "0x1.9c2d163a1aa2dp-1", "0x1.bc2860d22477p-3",
    "0x1.886e6037841edp-1", "0x1.1058bc8a07ee1p-2",
    "0x1.767dcf5534862p-1", "0x1.4043057b6ee09p-2",
)).reshape(16, 2)  # fmt: skip
_LOGF_INVC = np.ascontiguousarray(_LOGF_TABLE[:, 0])
_LOGF_LOGC = np.ascontiguousarray(_LOGF_TABLE[:, 1])
_LN2 = float.fromhex("0x1.62e42fefa39efp-1")
_A0 = float.fromhex("-0x1.00ea348b88334p-2")
_A1 = float.fromhex("0x1.5575b0be00b6ap-2")
_A2 = float.fromhex("-0x1.ffffef20a4123p-2")
_LOGF_OFF = 0x3F330000


def logf_float64(y: Any) -> tuple[Any, Any]:
    """glibc's ``logf`` on float32 ``y`` before its final rounding: the float64 values and
    a mask of the arguments it does not cover here (zero, negative, subnormal, infinity,
    NaN: glibc's special branch)."""
    y = np.asarray(y, dtype=np.float32)
    ix = y.view(np.uint32).astype(np.int64)
    special = (ix - 0x00800000) >= (0x7F800000 - 0x00800000)  # unsigned in C: ix < 2**23 too
    special |= ix < 0x00800000
    tmp = ix - _LOGF_OFF
    i = (tmp >> 19) & 15
    k = tmp >> 23  # arithmetic shift of the int32 (tmp fits: ix is a normal positive float)
    iz = ix - (tmp & (0x1FF << 23))
    z = iz.astype(np.uint32).view(np.float32).astype(np.float64)
    r = z * _LOGF_INVC[i] - 1.0
    y0 = _LOGF_LOGC[i] + k.astype(np.float64) * _LN2
    r2 = r * r
    out = _A1 * r + _A2
    out = _A0 * r2 + out
    out = out * r2 + (y0 + r)
    out[ix == 0x3F800000] = 0.0
    out[special] = np.nan
    return out, special


def sure(wide: Any, relative: float, absolute: float) -> tuple[Any, Any]:
    """``wide`` rounded to float32, and a mask of the values that round the same whatever
    their error within ``relative * |wide| + absolute``."""
    if relative:
        margin = np.abs(wide)
        margin *= relative
        margin += absolute
    else:
        margin = np.full(wide.shape, absolute)
    low = (wide - margin).astype(np.float32)
    margin += wide
    high = margin.astype(np.float32)
    return high, low == high


KERNELS: dict[str, tuple[Any, float, float]] = {
    "cosf": (cosf_float64, 0.0, TOLERANCE),
    "logf": (logf_float64, 2.0**-40, 2.0**-66),
}


# glibc's powf (``sysdeps/ieee754/flt-32/e_powf.c``): log2(x) from a 16-interval table
# (the intervals and 1/c of logf's above) and a degree-5 polynomial, times y, then 2**that
# from a 32-entry table and a degree-3 polynomial. The tables are what their definitions
# give (see _powf_tables); the polynomials are published constants of the algorithm.
_POW_A = _hexes(
    "0x1.27616c9496e0bp-2",
    "-0x1.71969a075c67ap-2",
    "0x1.ec70a6ca7baddp-2",
    "-0x1.7154748bef6c8p-1",
    "0x1.71547652ab82bp0",
)
_EXP2_C = _hexes("0x1.c6af84b912394p-5", "0x1.ebfce50fac4f3p-3", "0x1.62e42ff0c52d6p-1")
_EXP2_SHIFT = float.fromhex("0x1.8p+52") / 32  # x + this rounds x to a multiple of 1/32
_POW_OVERFLOW = float.fromhex("0x1.fffffffd1d571p+6")  # above: |x**y| rounds past float32's max
_POW_UNDERFLOW = -150.0  # at or below: x**y rounds to zero
_POW_TOLERANCE = 2.0**-47
"""Relative, per unit of ``|y log2 x| + 1``: how far the float64 value may be from glibc's.

Where glibc's FMA build fuses a product into a sum here rounded twice, log2(x) differs by
a few units of 2**-53 of the largest term (at most about 3 |log2 x| away from x = 1, where
``r`` is exact), which ``y`` multiplies into ``y log2 x``, whose error becomes a relative
one of ``ln 2`` times it in ``2 ** (y log2 x)``; the exponential's own polynomial adds a
few units of 2**-53. 2**-47 per unit of ``|y log2 x| + 1`` covers that with a factor of
about 8 to spare. On 10^7 pairs of every range compared with the C library no float64
value rounded differently from glibc's, margin or not."""
_POW_TABLES: list[Any] = []


def _powf_tables() -> tuple[Any, Any, Any, Any]:
    """glibc's powf tables from their definitions, correctly rounded (computed once, in
    decimal with 60 digits): ``log2(c) = -log2(invc)`` for logf's 16 values of ``invc``,
    and ``2**(i/32)`` for ``i < 32`` as float64 bits less ``i << 47`` (so that adding the
    exponent step ``k << 47`` of ``2**(k/32)`` gives its bits); with ``invc`` split into
    a 26-bit high part and the rest, for an exact ``z * invc - 1`` (see :func:`powf_float64`)."""
    if not _POW_TABLES:
        with decimal.localcontext() as context:
            context.prec = 60
            ln2 = decimal.Decimal(2).ln()
            log2c = [float(-decimal.Decimal(v).ln() / ln2) for v in _LOGF_INVC.tolist()]
            exp2 = [float((decimal.Decimal(i) / 32 * ln2).exp()) for i in range(32)]
        table = np.array(exp2).view(np.uint64) - (np.arange(32, dtype=np.uint64) << np.uint64(47))
        high = (_LOGF_INVC.view(np.uint64) & ~np.uint64((1 << 27) - 1)).view(np.float64)
        _POW_TABLES[:] = [np.array(log2c), table, high, _LOGF_INVC - high]
    return _POW_TABLES[0], _POW_TABLES[1], _POW_TABLES[2], _POW_TABLES[3]


_LOG2_OF_ONE: dict[bytes, tuple[float, bool]] = {}


def _log2_of_one(x: np.float32) -> tuple[float, bool]:
    """:func:`log2f_float64` of one float32 (a schedule's base, the same chunk after
    chunk), remembered for the last 64 bases."""
    key = x.tobytes()
    found = _LOG2_OF_ONE.get(key)
    if found is None:
        logx, special = log2f_float64(np.array([x], dtype=np.float32))
        if len(_LOG2_OF_ONE) >= 64:
            _LOG2_OF_ONE.clear()
        found = _LOG2_OF_ONE[key] = (float(logx[0]), bool(special[0]))
    return found


def log2f_float64(x: Any) -> tuple[Any, Any]:
    """glibc's ``log2_inline`` of powf on float32 ``x``: log2(x) in float64, and a mask of
    the arguments it does not cover here (zero, negative, subnormal, infinity, NaN).

    ``r = z * invc - 1`` is computed exactly rounded, as the fused multiply-add of glibc's
    FMA build gives it: ``z`` has 24 significant bits, so ``z * high`` (26) and ``z * low``
    (27) are exact, ``z * high - 1`` is exact (it is small), and one rounding of the sum
    remains; the polynomial's other products are rounded here, fused there (see
    :data:`_POW_TOLERANCE`)."""
    log2c, _, high, low = _powf_tables()
    ix = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.int64)
    special = (ix < 0x00800000) | (ix >= 0x7F800000)  # also every negative x: its sign bit
    tmp = ix - _LOGF_OFF
    i = (tmp >> 19) & 15
    k = tmp >> 23  # arithmetic: C's (int32) cast of the masked top bits, then >> 23
    z = (ix - (k << 23)).astype(np.uint32).view(np.float32).astype(np.float64)
    r = z * high.take(i)
    r -= 1.0
    r += z * low.take(i)
    a0, a1, a2, a3, a4 = _POW_A
    y0 = log2c.take(i)
    y0 += k
    r2 = r * r
    y = a0 * r + a1
    p = a2 * r + a3
    r4 = r2 * r2
    q = a4 * r + y0
    q = p * r2 + q
    y = y * r4 + q
    return y, special


def exp2_float64(xd: Any) -> Any:
    """glibc's ``exp2_inline`` of powf (without a sign): ``2**xd`` in float64 for float64
    ``xd`` in ``(-150, 128)``: ``xd = k/32 + r`` with ``|r| <= 1/64``, ``2**(k/32)`` built
    from the table's bits and ``2**r`` a degree-3 polynomial. ``xd`` is overwritten."""
    _, table, _, _ = _powf_tables()
    kd = xd + _EXP2_SHIFT
    ki = kd.view(np.uint64)
    s = table.take((ki & np.uint64(31)).view(np.int64))
    s += ki << np.uint64(47)  # wraps modulo 2**64, as in C
    s = s.view(np.float64)
    kd -= _EXP2_SHIFT
    r = np.subtract(xd, kd, out=xd)
    c0, c1, c2 = _EXP2_C
    r2 = np.multiply(r, r, out=kd)
    z = r * c0
    z += c1
    z *= r2  # z * r2
    r *= c2
    r += 1.0
    r += z  # (c2 * r + 1) + z * r2: C's addition is commutative
    r *= s
    return r


@np.errstate(all="ignore")  # NaN, infinities and huge exponents are expected here
def powf_float64(x: Any, y: Any) -> tuple[Any, Any | None, float]:
    """glibc's ``powf`` on float32 ``x`` and ``y`` (broadcast together) before its final
    rounding: the float64 values, a mask of the arguments it does not cover here (``x``
    negative, subnormal, infinite or NaN, or zero with ``y <= 0``; ``y`` infinite or NaN;
    results that overflow), None where there are none, and the largest ``|y log2 x|``
    among the others, which bounds how far the float64 values may be from glibc's (see
    :data:`_POW_TOLERANCE`). A result below float32's range is 0, as glibc's."""
    x, y = np.asarray(x, dtype=np.float32), np.asarray(y, dtype=np.float32)
    special: Any
    if x.size == 1 and y.ndim >= x.ndim:  # one base (a decay rate): its log once
        logx, special = _log2_of_one(x.reshape(-1)[0])
        ylogx = y.astype(np.float64)
        ylogx *= logx
    else:
        x, y = np.broadcast_arrays(x, y)
        logx, special = log2f_float64(x)
        ylogx = y.astype(np.float64)
        ylogx *= logx
    zero = None
    if not ylogx.size:
        return ylogx, None, 0.0
    low, high = float(ylogx.min()), float(ylogx.max())
    if np.any(special) or not _POW_UNDERFLOW < low <= high <= _POW_OVERFLOW:  # NaN: False
        if x.shape != y.shape:  # one base
            x = np.broadcast_to(x.reshape((1,) * y.ndim), y.shape)
        special = np.broadcast_to(special, y.shape)
        iy = y.view(np.uint32)
        special = special | ((iy & np.uint32(0x7FFFFFFF)) - np.uint32(1) >= np.uint32(0x7F7FFFFF))
        # Two of glibc's special cases that schedules meet: 0 ** y is 0 for y > 0 (a
        # polynomial decay past its end), and x ** 0 is 1 for x not NaN.
        zero = (x.view(np.uint32) == 0) & (y > 0)
        one = ((iy & np.uint32(0x7FFFFFFF)) == 0) & ~np.isnan(x)
        special &= ~(zero | one)
        special |= ylogx > _POW_OVERFLOW
        zero |= (ylogx <= _POW_UNDERFLOW) & ~special
        ylogx[zero | special | one] = 0.0
        low, high = float(ylogx.min()), float(ylogx.max())
    else:  # every x positive and normal, every y finite (a zero gives 1, as glibc's)
        special = None
    reach = max(-low, high)
    out = exp2_float64(ylogx)
    if zero is not None:
        out[zero] = 0.0
    return out, special, reach


_BELOW = np.uint64((1 << 29) - 1)  # the float64 significand bits a float32 drops
_HALF = np.int64(1 << 28)  # their value at a rounding boundary (half a float32 ulp)
_TINY = float(np.finfo(np.float32).tiny)
_SUBNORMAL = _TINY - 2.0**-150  # below: rounds to a subnormal float32 (at it: to _TINY, even)


@np.errstate(all="ignore")
def powf_sure(x: Any, y: Any, flush: bool = False) -> tuple[Any, Any]:
    """:func:`powf_float64` rounded to float32, and a mask of the results that round as
    glibc's whatever the float64 value's error (within ``_POW_TOLERANCE * (reach + 1)``
    relative, in float64 units in the last place): those whose dropped bits are farther
    than that from half a float32 unit, and the zeros of an underflow. Results below
    float32's smallest normal number have other boundaries: with ``flush`` they are zero
    (flushed, as the peers run) where they are surely below it, else they are not among
    the sure ones; nor are the special arguments."""
    wide, special, reach = powf_float64(x, y)
    rounded = wide.astype(np.float32)
    units = np.int64(math.ceil(_POW_TOLERANCE * (reach + 1.0) * 2.0**53))
    dropped = (wide.view(np.uint64) & _BELOW).view(np.int64)
    dropped -= _HALF
    np.abs(dropped, out=dropped)
    certain = dropped > units
    if special is not None:
        certain &= ~special
    if wide.size and float(wide.min()) < _TINY:
        below = wide < _TINY
        if flush:
            surely = wide < _SUBNORMAL * (1.0 - _POW_TOLERANCE * (reach + 1.0))
            rounded[surely] = 0.0
            certain[below] = surely[below]
        else:
            certain[below] = wide[below] == 0.0
        if special is not None:
            certain &= ~special
    return rounded, certain


def vectorised_pow(x: Any, y: Any, libm: Any, flush: bool = False) -> Any:
    """``libm(x, y)`` (``libm`` a NumPy ufunc calling the C library's ``powf``) for every
    pair of float32 ``x`` and ``y`` (broadcast together), bit for bit the C library's where
    it is glibc's algorithm: :func:`powf_float64`, with ``libm`` itself computing the
    special arguments and the few results near a rounding boundary, in chunks of
    :data:`CHUNK` elements. With ``flush``, results below float32's smallest normal number
    are zero (as the peers run; the C library's results are flushed too).

    Example:
        >>> never = np.frompyfunc(lambda a, b: np.float32(-9), 2, 1)  # called for 0 ** -1
        >>> x, y = np.float32([0.5, 2.0, 0.0]), np.float32([2.0, 3.0, -1.0])
        >>> vectorised_pow(x, y, never).tolist()
        [0.25, 8.0, -9.0]
    """
    x, y = np.broadcast_arrays(np.asarray(x, dtype=np.float32), np.asarray(y, dtype=np.float32))
    shape, size = x.shape, x.size
    one_base = _one(x)
    one_exponent = _one(y)
    flat_x = x.reshape(-1)[:1] if one_base else np.ascontiguousarray(x).reshape(-1)
    flat_y = y.reshape(-1)[:1] if one_exponent else np.ascontiguousarray(y).reshape(-1)
    out = np.empty(size, dtype=np.float32)
    with np.errstate(all="ignore"):
        for start in range(0, size, CHUNK):
            end = min(start + CHUNK, size)
            part_x = flat_x if one_base else flat_x[start:end]
            part_y = flat_y if one_exponent else flat_y[start:end]
            if (one_base or _constant(part_x)) and (one_exponent or _constant(part_y)):
                # one value for the whole chunk (a schedule past its end, a staircase)
                out[start:end] = _constant_pow(part_x[:1], part_y[:1], libm, flush)
                continue
            if one_base and one_exponent:
                part_y = np.broadcast_to(part_y, (end - start,))
            out[start:end] = _pow_sure_or_libm(part_x, part_y, libm, flush)
    return out.reshape(shape)


_CONSTANT: dict[tuple[bytes, bytes, bool, Any], Any] = {}


def _constant_pow(x: Any, y: Any, libm: Any, flush: bool) -> Any:
    """The value of a one-element pair, remembered for the last 64 pairs: a schedule past
    its end (or on a long stair) is the same value block after block."""
    key = (x.tobytes(), y.tobytes(), flush, libm)
    value = _CONSTANT.get(key)
    if value is None:
        if len(_CONSTANT) >= 64:
            _CONSTANT.clear()
        value = _CONSTANT[key] = _pow_sure_or_libm(x, y, libm, flush)[0]
    return value


def _one(a: Any) -> bool:
    """Whether broadcast ``a`` is one value repeated (all strides 0)."""
    return bool(a.size) and a.strides == (0,) * a.ndim


def _constant(a: Any) -> bool:
    """Whether float32 ``a`` holds one bit pattern (``-0.0`` is not ``0.0``)."""
    bits = a.view(np.uint32)
    if bits[0] != bits[-1]:  # most chunks that vary (a schedule's steps are monotonic)
        return False
    return bool(bits.min() == bits.max())


def _pow_sure_or_libm(x: Any, y: Any, libm: Any, flush: bool) -> Any:
    """:func:`powf_sure`, with ``libm`` computing the results it is not sure of (flushed
    with ``flush``)."""
    rounded, certain = powf_sure(x, y, flush)
    if not certain.all():
        unsure = ~certain
        base, exponent = np.broadcast_arrays(x, y)
        theirs = np.asarray(libm(base[unsure], exponent[unsure]), dtype=np.float32)
        if flush:
            theirs[np.abs(theirs) < _TINY] *= 0  # keeps the sign, and NaN
        rounded[unsure] = theirs
    return rounded


_LOCAL = threading.local()  # each thread's _Work, kept between calls


class _Work:
    """Float64 buffers of :data:`CHUNK` elements, reused chunk after chunk: no allocation
    (and no page faults) inside the loop."""

    def __init__(self) -> None:
        self.x, self.a, self.b, self.c, self.out = (np.empty(CHUNK) for _ in range(5))
        self.t = np.empty(CHUNK, dtype=np.int32)
        self.low = np.empty(CHUNK, dtype=np.float32)
        self.high = np.empty(CHUNK, dtype=np.float32)
        self.unsure = np.empty(CHUNK, dtype=bool)


def _cosf_into(y: Any, w: _Work, size: int) -> Any:
    """:func:`cosf_float64` of a chunk whose ``|y|`` are all below 120, computed in ``w``'s
    buffers, operation for operation as :func:`_fast` and the polynomials (the same
    bits); returns ``w.out[:size]``, or None where the chunk spans several quadrants (the
    caller then uses :func:`cosf_float64`)."""
    x, a, b, c, out, t = w.x[:size], w.a[:size], w.b[:size], w.c[:size], w.out[:size], w.t[:size]
    np.copyto(x, y)  # float32 -> float64, exact
    np.multiply(x, _HPI_INV_2_24, out=a)
    np.copyto(t, a, casting="unsafe")  # C's truncating conversion
    t += np.int32(0x800000)
    t >>= np.int32(24)
    n = int(t[0])
    if n != int(t.min()) or n != int(t.max()):
        return None
    if n:
        x -= n * _HPI_HI  # exact (see _HPI_HI), as in _fast
        x -= n * _HPI_LO  # an exact product, one rounding: as in _fast
    np.multiply(x, x, out=a)  # r2
    if n & 1:  # sine polynomial
        np.multiply(x, a, out=b)  # x3
        np.multiply(a, _S3, out=c)
        c += _S2  # s1
        np.multiply(b, _S1, out=out)
        out += x  # s
        b *= a  # x7
        b *= c
        out += b
        negate = bool((n + 1) & 2)
    else:  # cosine polynomial
        np.multiply(a, a, out=b)  # x4
        np.multiply(a, _C4, out=c)
        c += _C3  # c2
        np.multiply(a, _C1, out=out)
        out += _C0  # c1
        np.multiply(b, _C2, out=x)
        out += x  # c = c1 + x4 * C2
        b *= a  # x6
        b *= c
        out += b
        negate = bool(n & 2)
    if negate:
        np.negative(out, out=out)
    return out


def vectorised(name: str, y: Any, libm: Any) -> Any:
    """``libm(y)`` (``name`` is ``"cosf"`` or ``"logf"``; ``libm`` a NumPy ufunc calling the
    C library's function) for every element of float32 ``y``, bit for bit the C library's
    where it is glibc's algorithm: the float64 evaluation, with ``libm`` itself recomputing
    the few results near a rounding boundary and the special arguments.

    The work is done in chunks of :data:`CHUNK` elements, in buffers that stay in the CPU's
    cache (on a whole array of a million steps each of some thirty passes would go to
    memory, and every temporary would be a fresh allocation).

    Example:
        >>> never = np.frompyfunc(lambda v: np.float32(-9), 1, 1)  # called for NaN only
        >>> vectorised("cosf", np.float32([0.0, 1.0, np.nan]), never).tolist()
        [1.0, 0.5403022766113281, -9.0]
    """
    kernel, relative, absolute = KERNELS[name]
    y = np.asarray(y, dtype=np.float32)
    flat = y.reshape(-1)
    out = np.empty(flat.shape, dtype=np.float32)
    work = getattr(_LOCAL, "work", None)
    if work is None or work.x.size != CHUNK:
        work = _LOCAL.work = _Work()
    with np.errstate(all="ignore"):
        for start in range(0, flat.size, CHUNK):
            part = flat[start : start + CHUNK]
            size = part.size
            wide = None
            if name == "cosf" and float(np.abs(part).max()) < 120.0:  # NaN compares False
                wide = _cosf_into(part, work, size)
            if wide is not None:
                low, high, unsure = work.low[:size], work.high[:size], work.unsure[:size]
                a = work.a[:size]
                np.subtract(wide, absolute, out=a)
                np.copyto(low, a, casting="same_kind")
                np.add(wide, absolute, out=a)
                np.copyto(high, a, casting="same_kind")
                np.not_equal(low, high, out=unsure)
                rounded = high
            else:
                wide, special = kernel(part)
                rounded, certain = sure(wide, relative, absolute)
                unsure = ~certain
                unsure |= special
            if unsure.any():
                rounded[unsure] = np.asarray(libm(part[unsure]), dtype=np.float32)
            out[start : start + CHUNK] = rounded
    return out.reshape(y.shape)
