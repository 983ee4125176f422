"""ResumableOrder: the framework-free epoch order that JAX and TensorFlow loops draw index
batches from, resumable mid-epoch and split over ranks (the torch ResumableSampler is made
of it; its own tests are test_torch_data*.py)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from globalstep import ConfigError
from globalstep.integrations._order import ResumableOrder


def _epoch(order: ResumableOrder, batch: int, *, stop_after: int | None = None) -> list[int]:
    drawn: list[int] = []
    for k, indices in enumerate(order.batches_of(batch)):
        drawn += indices.tolist()
        if stop_after is not None and k + 1 == stop_after:
            break
    return drawn


def test_batches_count_what_the_loop_took_and_resume_there():
    """A state taken after 2 of 4 batches resumes at the third, bit for bit; the epoch
    ends once its batches are drawn and the next one has its own order."""
    order = ResumableOrder(10, seed=3)
    whole = order.order().tolist()
    first = _epoch(order, 3, stop_after=2)
    assert first == whole[:6]
    state = order.state_dict()
    assert state == {"seed": 3, "epoch": 0, "position": 6}
    resumed = ResumableOrder(10, seed=3)
    resumed.load_state_dict(state)
    assert [b.tolist() for b in resumed.batches_of(3)] == [whole[6:9], whole[9:]]
    assert resumed.state_dict() == {"seed": 3, "epoch": 1, "position": 0}
    assert resumed.order().tolist() != whole
    assert sorted(resumed.order().tolist()) == list(range(10))


def test_drop_remainder_counts_the_dropped_rows_as_drawn():
    order = ResumableOrder(5, shuffle=False)
    assert [b.tolist() for b in order.batches_of(2, drop_remainder=True)] == [[0, 1], [2, 3]]
    assert order.state_dict() == {"seed": 0, "epoch": 1, "position": 0}


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"batch_size": 0}, r"`batch_size` must be an int >= 1; got batch_size=0"),
        ({"batch_size": 2, "drop_remainder": 1}, r"`drop_remainder` must be a bool; got"),
    ],
)
def test_batches_of_refuses_bad_arguments(keywords, message):
    with pytest.raises(ConfigError, match=message):
        ResumableOrder(4).batches_of(**keywords)


def test_two_to_one_to_two_ranks_draw_every_index_once():
    """2 ranks draw 2 batches and save; 1 rank restores both states, draws 1 batch and
    saves; 2 ranks restore it and finish the epoch: every index once."""
    n, batch = 23, 3
    drawn: Counter[int] = Counter()
    twos = [ResumableOrder(n, seed=9, rank=r, world_size=2) for r in (0, 1)]
    for order in twos:
        drawn.update(_epoch(order, batch, stop_after=2))
    states = [order.state_dict() for order in twos]
    one = ResumableOrder(n, seed=9, rank=0, world_size=1)
    one.load_state_from_ranks(states, rank=0, world_size=1, step=2)
    assert one.position == 12
    drawn.update(_epoch(one, batch, stop_after=1))
    saved = one.state_dict()
    again = [ResumableOrder(n, seed=9, rank=r, world_size=2) for r in (0, 1)]
    for r, order in enumerate(again):
        order.load_state_from_ranks([saved], rank=r, world_size=2, step=3)
        drawn.update(_epoch(order, batch))
        assert order.epoch == 1
    assert drawn == Counter(range(n))


def test_a_state_of_another_seed_or_rank_is_refused():
    order = ResumableOrder(6, seed=1, rank=0, world_size=2)
    with pytest.raises(ConfigError, match=r"`state\['seed'\]` must equal this sampler's seed 1"):
        order.load_state_dict({"seed": 2, "epoch": 0, "position": 0})
    other = ResumableOrder(6, seed=1, rank=1, world_size=2).state_dict()
    with pytest.raises(ConfigError, match=r"`state` must be saved by this sampler's rank 0 of 2"):
        order.load_state_dict(other)


def test_the_order_is_numpy_only():
    """No framework: the order is NumPy's PCG64 permutation of (seed, epoch)."""
    expected = np.random.Generator(np.random.PCG64(np.random.SeedSequence([4, 2])))
    order = ResumableOrder(7, seed=4)
    assert order.order(2).tolist() == expected.permutation(7).tolist()
