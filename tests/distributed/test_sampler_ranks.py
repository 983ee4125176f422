"""ResumableSampler over real gloo ranks: 4 -> 2 -> 4 ranks mid-epoch through a distributed
CheckpointManager; every sample of the epoch is drawn exactly once across the attempts, and
each restore on another world size warns that the ranks' RNG cannot resume exactly.

The ranks are forked by spawn.py and run sampler_workers.py (one attempt a spawn, one
checkpoint directory for all three). The same split and remap, simulated in one process
over many world sizes and lengths, is tests/integrations/test_torch_data_ranks.py.
"""

from __future__ import annotations

from collections import Counter

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch.distributed")

import sampler_workers as job  # noqa: E402
from spawn import spawn  # noqa: E402

from globalstep.integrations.torch import ResumableSampler  # noqa: E402

pytestmark = pytest.mark.slow  # three groups of 4, 2 and 4 forked ranks

ATTEMPTS = (("a", 4), ("b", 2), ("c", 4))


@pytest.fixture(scope="module")
def attempts(tmp_path_factory):
    """Each attempt's results, rank by rank: 4 ranks to step 3, 2 to step 7, 4 to the end."""
    out = tmp_path_factory.mktemp("sampler")
    results = {name: spawn(name, size, out, module="sampler_workers") for name, size in ATTEMPTS}
    return results | {"checkpoints": out / "checkpoints"}


def _order():
    return ResumableSampler(job.LENGTH, seed=job.SEED).order(0).tolist()


def test_every_sample_of_the_epoch_is_drawn_exactly_once(attempts):
    """The union of every rank's draws in every attempt is the epoch, each sample once."""
    drawn = [i for name, _ in ATTEMPTS for rank in attempts[name] for i in rank["drawn"]]
    assert Counter(drawn) == Counter(range(job.LENGTH))
    assert attempts["c"][0]["end"] == {"step": 11, "epoch": 1, "position": 0}


def test_each_attempt_splits_the_rest_of_the_epoch_over_its_ranks(attempts):
    """Rank r of W draws order[start + r::W]: 36 samples on 4 ranks, 24 on 2, 41 on 4."""
    order = _order()
    for (name, size), start, count in zip(ATTEMPTS, (0, 36, 60), (36, 24, 41), strict=True):
        ranks = attempts[name]
        assert [(r["rank"], r["world_size"]) for r in ranks] == [(r, size) for r in range(size)]
        shares = [order[start + r : start + count : size] for r in range(size)]
        assert [r["drawn"] for r in ranks] == shares


def test_a_restore_on_another_world_size_starts_at_the_global_position(attempts):
    """Every rank restores the step and the global position that all the old ranks left."""
    assert [r["start"] for r in attempts["b"]] == [{"step": 3, "epoch": 0, "position": 36}] * 2
    assert [r["start"] for r in attempts["c"]] == [{"step": 7, "epoch": 0, "position": 60}] * 4
    assert [r["end"]["position"] for r in attempts["b"]] == [60, 60]
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
        firsts = [rank["noise"][0] for rank in attempts[name]]
        assert len(set(firsts)) == len(firsts)


def test_two_ranks_checkpoint_restores_on_one_process(attempts):
    """Step 7, saved on 2 ranks, restored by one process without torch.distributed: the
    one sampler draws the whole rest of the epoch, from the global position 60."""
    from globalstep import CheckpointManager, Clock
    from globalstep.errors import WorldSizeWarning
    from globalstep.integrations.torch import RNGState

    sampler, clock = ResumableSampler(job.LENGTH, seed=job.SEED), Clock()
    manager = CheckpointManager(attempts["checkpoints"], read_only=True)
    with manager, pytest.warns(WorldSizeWarning, match="2 -> 1"):
        manager.restore({"clock": clock, "data": sampler, "rng": RNGState()}, step=7)
    assert (clock.step, sampler.state_dict()) == (7, {"seed": 7, "epoch": 0, "position": 60})
    assert list(sampler) == _order()[60:]
