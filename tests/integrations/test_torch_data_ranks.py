"""Tests for ResumableSampler over ranks: each rank's share, the global position, the remap.

Several ranks are simulated in one process: one sampler a rank, each taking the same number
of samples an update (a lockstep DDP loop). The real thing, on gloo ranks with a distributed
CheckpointManager, is tests/distributed/test_sampler_ranks.py.
"""

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader  # noqa: E402

from globalstep import (  # noqa: E402
    CheckpointManager,
    ConfigError,
)
from globalstep.integrations.torch import ResumableSampler  # noqa: E402


def _ranks(n, world, *, seed=5, **options):
    return [
        ResumableSampler(n, seed=seed, rank=r, world_size=world, **options) for r in range(world)
    ]


def _update(samplers, batch):
    """One lockstep update: each rank takes its next ``batch`` samples (fewer at the end)."""
    drawn = []
    for sampler in samplers:
        taken = list(sampler)[:batch]
        sampler.advance(len(taken))
        drawn.extend(taken)
    return drawn


def _remap(samplers, world, *, seed=5, step=0):
    """Every old rank's state handed to ``world`` new samplers, as the manager does."""
    states = [s.state_dict() for s in samplers]
    n = len(samplers[0].order())
    fresh = _ranks(n, world, seed=seed)
    for rank, sampler in enumerate(fresh):
        sampler.load_state_from_ranks(states, rank=rank, world_size=world, step=step)
    return fresh


def _attempts(n, batch, plan, *, seed=5):
    """Draws epoch 0 over the attempts ``plan`` = [(world, updates), ...], the last one to
    the epoch's end (``updates`` None); returns every index drawn, and the last samplers."""
    drawn = []
    samplers = None
    for world, updates in plan:
        samplers = _ranks(n, world, seed=seed) if samplers is None else _remap(samplers, world)
        count = 0
        while any(len(s) for s in samplers) and (updates is None or count < updates):
            drawn += _update(samplers, batch)
            count += 1
    return drawn, samplers


@pytest.mark.parametrize("n", [40, 41, 43, 7])
@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_the_ranks_split_each_epoch_once(n, world):
    """Rank r of W draws order[r::W]: together every sample of the epoch once."""
    samplers = _ranks(n, world)
    order = samplers[0].order().tolist()
    shares = [list(s) for s in samplers]
    assert shares == [order[r::world] for r in range(world)]
    assert sorted(i for share in shares for i in share) == list(range(n))
    assert [len(s) for s in samplers] == [len(share) for share in shares]
    assert max(map(len, shares)) - min(map(len, shares)) <= 1


def test_every_rank_shares_one_order_per_seed_and_epoch():
    """The ranks' order is the one-process order; epochs and seeds still differ."""
    alone = ResumableSampler(30, seed=3)
    ranks = _ranks(30, 3, seed=3)
    for epoch in (0, 4):
        assert all(np.array_equal(s.order(epoch), alone.order(epoch)) for s in ranks)
    assert not np.array_equal(ranks[0].order(0), ranks[0].order(1))


def test_the_position_is_global_and_equal_on_every_rank():
    """After k lockstep updates of b samples on W ranks, each rank's position is W*k*b."""
    samplers = _ranks(50, 4)
    for _ in range(3):
        _update(samplers, 2)
    assert [s.position for s in samplers] == [24] * 4
    assert [s.state_dict() for s in samplers] == [
        {"seed": 5, "epoch": 0, "position": 24, "start": 0, "rank": r, "world_size": 4}
        for r in range(4)
    ]
    assert [len(s) for s in samplers] == [7, 7, 6, 6]  # 26 left: 7 + 7 + 6 + 6


@pytest.mark.parametrize(
    ("n", "batch", "plan"),
    [
        (64, 2, [(4, 3), (2, 5), (4, None)]),  # 4 -> 2 -> 4 mid-epoch, even
        (67, 3, [(4, 2), (2, 3), (4, None)]),  # uneven length
        (23, 2, [(4, 1), (2, 2), (4, None)]),  # uneven, the 4 ranks' last batches differ
        (30, 4, [(3, 1), (1, 2), (4, 1), (2, None)]),  # through one process and back
        (10, 1, [(4, 2), (2, 0), (4, None)]),  # an attempt that drew nothing
    ],
)
def test_a_changed_world_size_draws_each_sample_once(n, batch, plan):
    """Across attempts on other world sizes, the union of every rank's draws is the epoch's
    samples, each exactly once, and nothing is drawn twice within an attempt."""
    drawn, last = _attempts(n, batch, plan)
    assert Counter(drawn) == Counter(range(n))
    assert all(len(s) == 0 for s in last)
    assert last[0].position == n  # the first rank draws the most


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 60),
    batch=st.integers(1, 5),
    plan=st.lists(st.tuples(st.integers(1, 5), st.integers(0, 4)), min_size=1, max_size=4),
)
def test_any_sequence_of_world_sizes_draws_each_sample_once(n, batch, plan):
    """Any sequence of world sizes and attempt lengths: each sample once in the epoch."""
    drawn, _ = _attempts(n, batch, [*plan, (plan[-1][0], None)])
    assert Counter(drawn) == Counter(range(n))


def test_the_remap_splits_the_rest_from_the_global_position():
    """4 ranks at position 24 of 50, restored on 2: rank r draws order[24 + r::2]."""
    old = _ranks(50, 4)
    for _ in range(3):
        _update(old, 2)
    new = _remap(old, 2, step=12)
    order = old[0].order().tolist()
    assert [list(s) for s in new] == [order[24::2], order[25::2]]
    assert [s.state_dict() for s in new] == [
        {"seed": 5, "epoch": 0, "position": 24, "start": 24, "rank": r, "world_size": 2}
        for r in range(2)
    ]


def test_the_same_world_size_restores_each_rank_exactly():
    """Each rank's own state restores, through load_state_dict, the rank's own rest."""
    old = _ranks(37, 3)
    _update(old, 4)
    new = _ranks(37, 3)
    for sampler, saved in zip(new, old, strict=True):
        sampler.load_state_dict(saved.state_dict())
    assert [list(s) for s in new] == [list(s) for s in old]
    assert [s.state_dict() for s in new] == [s.state_dict() for s in old]


def test_the_epochs_tail_with_ranks_an_epoch_apart():
    """At an uneven epoch's end, a rank whose loader ended is at the next epoch while the
    others still hold their last samples drawn: the remap starts that next epoch."""
    n = 10
    samplers = _ranks(n, 4)
    data = list(range(n))
    loaders = [DataLoader(data, batch_size=2, sampler=s) for s in samplers]
    iterators = [s.batches(loader) for s, loader in zip(samplers, loaders, strict=True)]
    for _ in range(2):  # ranks 0 and 1 have 3 samples (2 batches), ranks 2 and 3 have 2
        for it in iterators[:2]:
            next(it)
    for it in iterators[2:]:
        next(it)
        assert next(it, None) is None  # exhausted: the epoch ended on ranks 2 and 3
    assert [(s.epoch, s.position) for s in samplers] == [(0, 10), (0, 10), (1, 0), (1, 0)]
    new = _remap(samplers, 2)
    assert [(s.epoch, s.position) for s in new] == [(1, 0), (1, 0)]
    assert [list(s) for s in new] == [new[0].order(1)[r::2].tolist() for r in range(2)]


def test_drop_last_on_ranks_counts_the_dropped_batch_as_drawn():
    """With drop_last each rank's partial batch is dropped and its epoch ends."""
    data = list(range(11))
    samplers = _ranks(11, 2)
    sizes = [
        [len(b) for b in s.batches(DataLoader(data, batch_size=2, sampler=s, drop_last=True))]
        for s in samplers
    ]
    assert sizes == [[2, 2, 2], [2, 2]]  # shares of 6 and 5
    assert [(s.epoch, s.position) for s in samplers] == [(1, 0), (1, 0)]


def test_batches_on_ranks_yield_the_rank_share():
    """Through a DataLoader, each rank's batches hold its share, resumed on another world."""
    data = list(range(20))
    samplers = _ranks(20, 2)
    firsts = []
    for s in samplers:
        it = s.batches(DataLoader(data, batch_size=3, sampler=s))
        firsts += [int(i) for i in next(it)]
    new = _remap(samplers, 4)
    rests = [int(i) for s in new for b in s.batches(DataLoader(data, 3, sampler=s)) for i in b]
    assert Counter(firsts + rests) == Counter(range(20))
    assert [s.state_dict()["epoch"] for s in new] == [1] * 4


def test_one_process_states_stay_as_before():
    """One process keeps {"seed", "epoch", "position"}; such a state (as every checkpoint
    before ranks) gives the global position from which ranks split the epoch."""
    alone = ResumableSampler(20, seed=5)
    alone.advance(6)
    assert alone.state_dict() == {"seed": 5, "epoch": 0, "position": 6}
    assert (alone.rank, alone.world_size) == (0, 1)
    ranks = _ranks(20, 2)
    for s in ranks:
        s.load_state_dict({"seed": 5, "epoch": 0, "position": 6})
    assert [list(s) for s in ranks] == [alone.order()[6 + r :: 2].tolist() for r in range(2)]
    remapped = _remap([alone], 2)
    assert [list(s) for s in remapped] == [list(s) for s in ranks]


def test_ranks_default_to_torchruns_variables(monkeypatch):
    """Without rank and world_size (and no process group), torchrun's variables decide."""
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    s = ResumableSampler(9)
    assert (s.rank, s.world_size, len(s)) == (2, 3, 3)
    assert "rank=2, world_size=3" in repr(s)


def test_a_ranked_sampler_round_trips_through_a_checkpoint(tmp_path):
    """On one process the ranked state is an ordinary leaf: saved and restored as it is."""
    s = ResumableSampler(10, seed=3, rank=1, world_size=2)
    s.advance(2)
    fresh = ResumableSampler(10, seed=3, rank=1, world_size=2)
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, {"data": s}, force=True)
        manager.restore({"data": fresh})
    assert fresh.state_dict() == s.state_dict()
    assert list(fresh) == list(s)


def _states(*specs):
    return [
        {"seed": 5, "epoch": e, "position": p, "start": s, "rank": r, "world_size": w}
        for e, p, s, r, w in specs
    ]


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: ResumableSampler(5, rank=2, world_size=2), r"`rank` must be < world_size=2"),
        (lambda: ResumableSampler(5, rank=0, world_size=0), r"`world_size` must be an int >= 1"),
        (lambda: ResumableSampler(5, rank=-1, world_size=2), r"`rank` must be an int >= 0"),
        (lambda: ResumableSampler(5, rank=1), r"Pass both rank= and world_size="),
        (
            lambda: ResumableSampler(10, seed=5, rank=0, world_size=2).load_state_dict(
                _states((0, 4, 0, 1, 2))[0]
            ),
            r"`state` must be saved by this sampler's rank 0 of 2; got state='rank 1 of 2'",
        ),
        (
            lambda: ResumableSampler(10, seed=5, rank=0, world_size=2).load_state_dict(
                _states((0, 4, 0, 0, 4))[0]
            ),
            r"load_state_from_ranks",
        ),
        (
            lambda: ResumableSampler(10, seed=5, rank=0, world_size=2).load_state_dict(
                _states((0, 4, 6, 0, 2))[0]
            ),
            r"`state\['start'\]` must be <= state\['position'\]=4",
        ),
        (
            lambda: ResumableSampler(10, seed=5, rank=0, world_size=2).load_state_dict(
                _states((0, 4, 0, 3, 2))[0]
            ),
            r"`state\['rank'\]` must be < state\['world_size'\]=2",
        ),
    ],
)
def test_ranks_refuse_bad_input(call, match):
    """Bad ranks and another rank's state are refused, naming the parameter and rule."""
    with pytest.raises(ConfigError, match=match):
        call()


def _remap_states(states, *, rank=0, world_size=2):
    ResumableSampler(10, seed=5, rank=0, world_size=2).load_state_from_ranks(
        states, rank=rank, world_size=world_size, step=3
    )


@pytest.mark.parametrize(
    ("states", "options", "match"),
    [
        ([], {}, r"`states` must be a non-empty list"),
        ({"seed": 5}, {}, r"`states` must be a non-empty list"),
        (_states((0, 4, 0, 0, 2)), {"rank": 1}, r"`rank` must equal this sampler's rank 0"),
        (_states((0, 4, 0, 0, 2)), {"world_size": 3}, r"`world_size` must equal .* 2"),
        (
            _states((0, 4, 0, 1, 2), (0, 4, 0, 0, 2)),
            {},
            r"`states\[0\]` must be the state of rank 0 of 2 .*got states\[0\]='rank 1 of 2'",
        ),
        (
            _states((0, 4, 0, 0, 2)),
            {},
            r"`states\[0\]` must be the state of rank 0 of 1",
        ),
        (
            [{"seed": 5, "epoch": 0, "position": 2}] * 2,
            {},
            r"got states\[0\]='a one-process state'",
        ),
        (
            [*_states((0, 4, 0, 0, 2)), {"seed": 6, "epoch": 0, "position": 4}],
            {},
            r"`states\[1\]\['seed'\]` must equal this sampler's seed 5",
        ),
        (
            _states((2, 0, 0, 0, 2), (0, 10, 0, 1, 2)),
            {},
            r"`states\[1\]\['epoch'\]` must be 2 or 1, .* not in lockstep; got .*=0",
        ),
        (
            _states((1, 0, 0, 0, 2), (0, 3, 0, 1, 2)),
            {},
            r"`states\[1\]\['position'\]` must end rank 1's share of epoch 0",
        ),
        (
            _states((0, 6, 0, 0, 2), (0, 2, 0, 1, 2)),
            {},
            r"`states` must leave a prefix of epoch 0's order drawn; sample 3 .* but 4 was",
        ),
    ],
)
def test_the_remap_refuses_states_it_cannot_split_exactly(states, options, match):
    """Malformed states, ranks out of lockstep or another rank's call are named."""
    with pytest.raises(ConfigError, match=match):
        _remap_states(states, **options)


def test_the_remap_of_an_empty_dataset():
    """An empty dataset remaps to an empty epoch."""
    new = _remap(_ranks(0, 2), 3)
    assert [(len(s), s.position) for s in new] == [(0, 0)] * 3
