"""ResumableSampler over real gloo ranks: 4 -> 2 -> 4 ranks mid-epoch through a distributed
CheckpointManager; every sample of the epoch is drawn exactly once across the attempts, and
each restore on another world size warns that the ranks' RNG cannot resume exactly.

The ranks are forked by spawn.py and run sampler_workers.py (one attempt a spawn, one
checkpoint directory for all): 4 ranks to step 3 and a save; 2 ranks saving at every odd
step, SIGKILLed at a random step K before its save (what they drew after the newest commit,
step S, is drawn again by the next attempt); 4 ranks from S to the epoch's end. The same
split and remap, simulated in one process over many world sizes and lengths, is
tests/integrations/test_torch_data_ranks.py.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

import sampler_workers as job  # noqa: E402
from spawn import spawn  # noqa: E402

from globalstep.integrations.torch import ResumableSampler  # noqa: E402

pytestmark = pytest.mark.slow  # three groups of 4, 2 and 4 forked ranks

KILL = random.Random(27).randrange(6, 12)  # the step at which the 2 ranks are SIGKILLed
COMMITTED = KILL - 1 if KILL % 2 == 0 else KILL - 2  # their newest save (odd steps)
ATTEMPTS = (("a", 4), (f"b-{KILL}", 2), ("c", 4))


@pytest.fixture(scope="module")
def attempts(tmp_path_factory):
    """Each attempt's results, rank by rank, by the attempt's first letter."""
    out = tmp_path_factory.mktemp("sampler")
    results = {}
    for name, size in ATTEMPTS:
        killed = (0, 1) if name.startswith("b-") else ()
        results[name[0]] = spawn(name, size, out, module="sampler_workers", killed=killed)
    return results | {"checkpoints": out / "checkpoints"}


def _order():
    return ResumableSampler(job.LENGTH, seed=job.SEED).order(0).tolist()


def _drawn(rank, updates=None):
    return [i for batch in rank["batches"][:updates] for i in batch]


def test_every_sample_of_the_epoch_is_drawn_exactly_once(attempts):
    """The union of what every rank drew up to each attempt's newest commit, and in the
    last attempt, is the epoch, each sample once; what the killed ranks drew after their
    newest commit is drawn again after the restore."""
    committed = [i for rank in attempts["a"] for i in _drawn(rank)]
    committed += [i for rank in attempts["b"] for i in _drawn(rank, COMMITTED - 3)]
    last = [i for rank in attempts["c"] for i in _drawn(rank)]
    assert Counter(committed + last) == Counter(range(job.LENGTH)), KILL
    lost = [i for rank in attempts["b"] for i in _drawn(rank)[job.BATCH * (COMMITTED - 3) :]]
    assert len(lost) == 2 * job.BATCH * (KILL - COMMITTED)
    assert set(lost) <= set(last)
    assert attempts["c"][0]["end"]["epoch"] == 1


def test_each_attempt_splits_the_rest_of_the_epoch_over_its_ranks(attempts):
    """Rank r of W draws order[start + r::W]: 36 samples on 4 ranks, then 2 ranks from
    36, then 4 ranks from the newest commit to the end."""
    order = _order()
    start = 36 + 2 * job.BATCH * (COMMITTED - 3)
    spans = {"a": (0, 36), "b": (36, 36 + 2 * job.BATCH * (KILL - 3)), "c": (start, job.LENGTH)}
    for name, size in ATTEMPTS:
        ranks = attempts[name[0]]
        assert [(r["rank"], r["world_size"]) for r in ranks] == [(r, size) for r in range(size)]
        begin, end = spans[name[0]]
        assert [_drawn(r) for r in ranks] == [order[begin + r : end : size] for r in range(size)]


def test_a_restore_on_another_world_size_starts_at_the_global_position(attempts):
    """Every rank restores the step and the global position that all the old ranks left."""
    position = 36 + 2 * job.BATCH * (COMMITTED - 3)
    assert [r["start"] for r in attempts["b"]] == [{"step": 3, "epoch": 0, "position": 36}] * 2
    assert [r["start"] for r in attempts["c"]] == [
        {"step": COMMITTED, "epoch": 0, "position": position}
    ] * 4
    assert not any(r["restored"] for r in attempts["a"])


def test_the_rng_warning_is_shown_once_on_each_rank(attempts):
    """Each rank restoring on another world size is told once that its RNG was derived
    anew (exactness cannot hold across world sizes); the sampler itself needs no warning."""
    for name, change in (("b", "4 -> 2"), ("c", "2 -> 4")):
        for rank in attempts[name]:
            warned = [m for category, m in rank["warnings"] if category == "WorldSizeWarning"]
            assert len(warned) == 1, rank["warnings"]
            assert change in warned[0]
            assert "rng" in warned[0]  # the RNGState leaf is named, the sampler ("data") not
            assert "data" not in warned[0]
    assert all(rank["warnings"] == [] for rank in attempts["a"])


def test_each_rank_has_its_own_random_stream_in_each_attempt(attempts):
    """The ranks' RNG differ from each other before and after a change of world size."""
    for name, _ in ATTEMPTS:
        firsts = [rank["noise"][0] for rank in attempts[name[0]]]
        assert len(set(firsts)) == len(firsts)


def test_two_ranks_checkpoint_restores_on_one_process(attempts):
    """The 2 ranks' newest commit, restored by one process without torch.distributed: the
    one sampler draws the whole rest of the epoch, from the global position."""
    from globalstep import CheckpointManager, Clock
    from globalstep._errors import WorldSizeWarning
    from globalstep.integrations.torch import RNGState

    position = 36 + 2 * job.BATCH * (COMMITTED - 3)
    sampler, clock = ResumableSampler(job.LENGTH, seed=job.SEED), Clock()
    manager = CheckpointManager(attempts["checkpoints"], read_only=True)
    with manager, pytest.warns(WorldSizeWarning, match="2 -> 1"):
        manager.restore({"clock": clock, "data": sampler, "rng": RNGState()})
    assert clock.step == COMMITTED
    assert sampler.state_dict() == {"seed": job.SEED, "epoch": 0, "position": position}
    assert list(sampler) == _order()[position:]
