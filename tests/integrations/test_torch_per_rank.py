"""Torch's per-rank leaves: RNGState and torch.Generator are taken as per-rank and can be
re-seeded (a restore on another number of ranks does it; tests/distributed/test_per_rank.py
shows the whole)."""

from __future__ import annotations

import random

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from globalstep import ConfigError  # noqa: E402
from globalstep.checkpoint import flatten_tree as flatten  # noqa: E402
from globalstep.checkpoint._ranks.perrank import is_per_rank, reseed, reseedable  # noqa: E402
from globalstep.integrations.torch import RNGState  # noqa: E402


def test_rng_state_and_generators_are_per_rank():
    """RNGState and torch.Generator are per-rank without a mark; a tensor is not."""
    for obj in (RNGState(cuda=False), torch.Generator()):
        assert is_per_rank(obj)
        assert reseedable(obj)
    assert not is_per_rank(torch.zeros(1))
    apart = flatten({"rng": RNGState(cuda=False), "g": torch.Generator()}, per_rank=True)
    assert apart.arrays == {}
    assert sorted(apart.per_rank or {}) == ["g", "rng"]


def test_rng_state_reseed_seeds_every_generator_from_the_seed():
    """The same seed gives the same Python, NumPy and torch draws; another seed others."""

    def draws():
        return (random.random(), float(np.random.uniform()), float(torch.rand(1)))

    rng = RNGState(cuda=False)
    saved = rng.state_dict()
    try:
        rng.reseed(123)
        first = draws()
        rng.reseed(123)
        assert draws() == first
        rng.reseed(124)
        other = draws()
        assert all(a != b for a, b in zip(first, other, strict=True))
    finally:
        rng.load_state_dict(saved)


def test_a_generator_reseeds_like_manual_seed():
    """reseed(torch.Generator) is manual_seed."""
    a, b = torch.Generator(), torch.Generator().manual_seed(9)
    reseed(a, 9)
    assert torch.equal(torch.rand(3, generator=a), torch.rand(3, generator=b))


@pytest.mark.parametrize("seed", [-1, 2**64, 1.0, True])
def test_rng_state_reseed_checks_its_seed(seed):
    """RNGState.reseed names a seed outside [0, 2**64)."""
    with pytest.raises(ConfigError, match=r"`seed` must be an int in \[0, 2\*\*64\)"):
        RNGState(cuda=False).reseed(seed)
