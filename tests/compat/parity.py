"""Helpers for the parity tests: the steps to compare at and a float32 ulp distance."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

LARGE_STEPS = (10**6, 2**31 - 1, 10**9, 10**12)


def parity_steps(
    periods: Iterable[int],
    *,
    largest: int = 10**12,
    multiples: int = 30,
    begin: int = 0,
    boundaries: Iterable[int] = (),
) -> np.ndarray:
    """Dense steps 0..50; ``begin`` plus each multiple of each period, and each of
    ``boundaries``, minus one, exact and plus one; and the large steps up to ``largest``."""
    steps = set(range(51))
    edges = {begin + k * period for period in periods for k in range(1, multiples + 1)}
    for edge in edges | set(boundaries):
        steps.update(s for s in (edge - 1, edge, edge + 1) if s >= 0)
    steps.update(s for s in LARGE_STEPS if s <= largest)
    return np.array(sorted(steps), dtype=np.int64)


def max_ulp(ours: np.ndarray, reference: np.ndarray) -> int:
    """The largest distance in float32 ulps between two arrays (0 means bit for bit)."""
    a = np.asarray(ours, dtype=np.float32).reshape(-1)
    b = np.asarray(reference, dtype=np.float32).reshape(-1)
    assert a.shape == b.shape
    both_nan = np.isnan(a) & np.isnan(b)
    ia = a.view(np.int32).astype(np.int64)
    ib = b.view(np.int32).astype(np.int64)
    # Map the sign-magnitude float order onto a monotone integer line.
    ia = np.where(ia < 0, -(ia & 0x7FFFFFFF), ia)
    ib = np.where(ib < 0, -(ib & 0x7FFFFFFF), ib)
    distance = np.where(both_nan, 0, np.abs(ia - ib))
    return int(distance.max()) if distance.size else 0
