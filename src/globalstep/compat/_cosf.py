"""The C library's float32 cosine (glibc's ``cosf``), bit for bit, on whole arrays.

TensorFlow's kernels on one step and XLA's eager ones call the C library's ``cosf``;
NumPy's float32 ``cos`` is a SIMD approximation that differs from it in the last bit on
about one argument in six, and calling ``cosf`` element by element through ctypes costs
about 4 us an element. This module evaluates glibc's algorithm (glibc 2.28 and later,
from Arm's optimized-routines: ``sysdeps/ieee754/flt-32/s_cosf.c``) in NumPy float64:

1. ``|y| < 2**-12``: 1.
2. ``|y| < 0.75`` (glibc compares the top 12 bits with those of pi/4): the cosine
   polynomial of ``x = y`` (which 3 also gives there).
3. ``|y| < 120``: ``n = round(y * 2/pi)`` (glibc's scaled truncation, reproduced), the
   reduced ``r = y - n * pi/2`` (rounded once, as the FMA build computes it: the product
   is split so that it is exact), and the sine or cosine polynomial of ``r`` by quadrant.
4. Larger finite ``|y|``: glibc's integer reduction with 4/pi to 192 bits (``reduce_large``),
   reproduced with uint64 arithmetic, then as 3.

The polynomials are evaluated in float64 without fused multiply-adds, where glibc's x86-64
FMA build fuses some of them, so the float64 value before the final rounding to float32
may differ from glibc's by a few units of 2**-53. Every result whose float64 value lies
within ``2**-46`` of a float32 rounding boundary (about one argument in a million) is
therefore recomputed with the C library's own ``cosf``, as are NaN and infinity: every
other result rounds to the same float32 as glibc's, whichever of its builds runs. Whether
the C library is this algorithm at all is checked once per process, on a probe of
thousands of arguments, by :func:`globalstep.compat._common.F32Ops`; elsewhere (musl,
macOS, an older glibc) ``cosf`` is called element by element.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

__all__ = ["CHUNK", "TOLERANCE", "cosf_float64", "cosf_vectorised"]

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

CHUNK = 1 << 15
"""Elements computed at a time."""

TOLERANCE = 2.0**-46
"""How far from a float32 rounding boundary a float64 value must be to round as glibc's."""

_BITS_075 = 0x3F400000  # |y| below: no reduction (top 12 bits below those of pi/4)
_BITS_TINY = 0x39800000  # 2**-12
_BITS_120 = 0x42F00000  # 120.0
_BITS_INF = 0x7F800000


def _cos_poly(x2: Any) -> Any:
    x4 = x2 * x2
    c2 = _C3 + x2 * _C4
    c1 = _C0 + x2 * _C1
    x6 = x4 * x2
    c = c1 + x4 * _C2
    return c + x6 * c2


def _sin_poly(x: Any, x2: Any) -> Any:
    x3 = x * x2
    s1 = _S2 + x2 * _S3
    x7 = x3 * x2
    s = x + x3 * _S1
    return s + x7 * s1


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
    n = t.astype(np.int64)
    nf = t.astype(np.float64)
    x -= nf * _HPI_HI
    nf *= _HPI_LO
    x -= nf
    return _by_quadrant(x, n, n)


def _by_quadrant(r: Any, n: Any, signed: Any) -> Any:
    """cos from the reduced argument ``r`` in quadrant ``n``: the sine polynomial where
    ``n`` is odd, else the cosine's, with glibc's signs taken from ``signed`` (``n`` plus
    the sign bit of a large argument): ``sign[signed & 3]`` on the sine's argument, and
    its table 1 (the cosine negated) where ``signed & 2``."""
    r2 = r * r
    odd = (n & 1).astype(bool)
    sign = np.where(((signed + 1) & 2).astype(bool), -1.0, 1.0)  # sign[i & 3]: 1,-1,-1,1
    negate_cos = (signed & 2).astype(bool)
    sine = _sin_poly(r * sign, r2)
    cosine = _cos_poly(r2)
    cosine = np.where(negate_cos, -cosine, cosine)
    return np.where(odd, sine, cosine)


def cosf_vectorised(y: Any, cosf: Any) -> Any:
    """``cosf(y)`` for every element of float32 ``y``, bit for bit the C library's where it
    is glibc's algorithm: the float64 evaluation, with ``cosf`` (a NumPy ufunc calling the
    C library) recomputing the few results near a rounding boundary and NaN/infinity.

    The work is done in chunks of :data:`CHUNK` elements, whose float64 temporaries stay in
    the CPU's cache (a whole array of a million steps makes each of some thirty passes
    go to memory)."""
    y = np.asarray(y, dtype=np.float32)
    flat = y.reshape(-1)
    out = np.empty(flat.shape, dtype=np.float32)
    for start in range(0, flat.size, CHUNK):
        part = flat[start : start + CHUNK]
        wide, special = cosf_float64(part)
        low = (wide - TOLERANCE).astype(np.float32)
        high = out[start : start + CHUNK]
        np.add(wide, TOLERANCE, out=wide)
        high[...] = wide
        unsure = low != high
        unsure |= special
        if unsure.any():
            high[unsure] = np.asarray(cosf(part[unsure]), dtype=np.float32)
    return out.reshape(y.shape)
