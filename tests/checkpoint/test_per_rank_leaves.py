"""Per-rank leaves on one process: the PerRank mark is transparent, random generators of
Python and NumPy are tree leaves, and the pieces a distributed save and a change of world
size use (detection, re-seeding, derived seeds, flattening apart) behave as documented.

The distributed saves and restores themselves are in tests/distributed/test_per_rank.py.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import globalstep
from globalstep import ConfigError
from globalstep._errors import WorldSizeError, WorldSizeWarning
from globalstep.checkpoint import Adapter, CheckpointManager, PerRank, Sharded
from globalstep.checkpoint import flatten_tree as flatten
from globalstep.checkpoint._ranks.perrank import derived_seed, is_per_rank, reseed, reseedable
from globalstep.checkpoint._tree.flatten import per_rank_nodes
from globalstep.run import GeneratorState


def test_per_rank_is_public_at_the_top_too():
    """``globalstep.PerRank`` is ``globalstep.checkpoint.PerRank``."""
    assert globalstep.PerRank is PerRank


def test_a_mark_is_transparent_on_one_process(tmp_path):
    """On one process a PerRank leaf is an ordinary one: state.json holds no per-rank node
    or section; the restored tree holds a mark where the template has one."""
    with CheckpointManager(tmp_path) as manager:
        manager.save(3, {"w": np.ones(2), "mine": PerRank({"a": np.arange(3.0)})})
        state = manager.metadata(3)
        assert "per_rank" not in state
        assert per_rank_nodes(state["tree"]) == {}
        template = {"w": np.zeros(2), "mine": PerRank({"a": np.zeros(3)})}
        tree = manager.restore(template)
    assert isinstance(tree["mine"], PerRank)
    assert tree["mine"].value["a"] is template["mine"].value["a"]  # filled in place
    assert template["mine"].value["a"].tolist() == [0.0, 1.0, 2.0]
    assert tree["w"].tolist() == [1.0, 1.0]
    # A marked template restores a checkpoint saved without the mark, and the reverse.
    with CheckpointManager(tmp_path / "plain") as manager:
        manager.save(1, {"a": np.full(2, 7.0)})
        marked = PerRank(np.zeros(2))
        manager.restore({"a": marked})
        assert marked.value.tolist() == [7.0, 7.0]


def test_marking_twice_is_marking_once():
    """PerRank(PerRank(x)) holds x."""
    inner = np.zeros(1)
    assert PerRank(PerRank(inner)).value is inner
    assert repr(PerRank(1)) == "PerRank(1)"


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.random.default_rng(5),
        lambda: np.random.Generator(np.random.MT19937(5)),
        lambda: np.random.RandomState(5),
        lambda: random.Random(5),
    ],
    ids=["pcg64", "mt19937", "RandomState", "random.Random"],
)
def test_random_generators_are_tree_leaves_restored_in_place(tmp_path, make):
    """NumPy's Generator and RandomState and Python's Random save and restore in place:
    the restored generator draws what the saved one would have (refused on main)."""
    saved = make()
    saved.random()
    with CheckpointManager(tmp_path) as manager:
        manager.save(1, {"g": saved})
        expected = [saved.random() for _ in range(5)]
        target = make()
        tree = manager.restore({"g": target})
        rebuilt = manager.restore()["g"]
    assert tree["g"] is target
    assert [target.random() for _ in range(5)] == expected
    assert type(rebuilt) is type(saved)
    assert [rebuilt.random() for _ in range(5)] == expected


def test_a_system_random_is_still_refused(tmp_path):
    """random.SystemRandom has no state to save: refused as before, naming the leaf."""
    with (
        CheckpointManager(tmp_path) as manager,
        pytest.raises(ConfigError, match=r"g: random\.SystemRandom"),
    ):
        manager.save(1, {"g": random.SystemRandom()})


def test_which_leaves_are_per_rank():
    """Marked leaves, the generators and classes that say so are per-rank; others not."""

    class Sampler:
        globalstep_per_rank = True

        def state_dict(self):
            return {}

    class Plain:
        globalstep_per_rank = "yes"  # only True counts

    for obj in (np.random.default_rng(), np.random.RandomState(), random.Random()):
        assert is_per_rank(obj)
        assert reseedable(obj)
        assert reseedable(PerRank(obj))
    assert is_per_rank(PerRank(1))
    assert not reseedable(PerRank(1))
    assert is_per_rank(Sampler())
    assert not reseedable(Sampler())
    for obj in (Plain(), {"a": 1}, np.zeros(1), 3):
        assert not is_per_rank(obj)


def test_flatten_takes_per_rank_leaves_apart_only_when_asked():
    """With per_rank=True a per-rank leaf's node and arrays go apart, named by its path."""
    state = {"w": np.ones(2), "r": {"g": random.Random(1)}, "m": PerRank([np.zeros(3)])}
    plain = flatten(state)
    assert plain.per_rank is None
    assert sorted(plain.arrays) == ["m/0", "r/g/state", "w"]
    apart = flatten(state, per_rank=True)
    assert sorted(apart.arrays) == ["w"]
    assert sorted(apart.rank_arrays) == ["m/0", "r/g/state"]
    assert apart.structure["dict"]["r"]["dict"]["g"] == {"per_rank": "r/g"}
    assert sorted(apart.per_rank or {}) == ["m", "r/g"]
    assert sorted(per_rank_nodes(apart.structure)) == ["m", "r/g"]


def test_a_sharded_tensor_inside_a_mark_is_refused():
    """Sharded tensors are every rank's already: marking one per-rank is an error."""
    marked = PerRank({"t": Sharded(object(), "float32", (4,))})
    with pytest.raises(ConfigError, match=r"per-rank leaves must not hold sharded tensors.*m: m/t"):
        flatten({"m": marked}, per_rank=True)


def test_reseeding_is_deterministic_and_per_seed():
    """reseed gives the same stream for the same seed, another for another seed."""
    for make in (np.random.default_rng, np.random.RandomState, random.Random):
        a, b, c = make(1), make(2), make(3)
        reseed(a, 11)
        reseed(b, 11)
        reseed(c, 12)
        assert a.random() == b.random() != c.random()
    wrapped = GeneratorState(np.random.default_rng(0))
    other = GeneratorState(np.random.default_rng(1))
    reseed(wrapped, 5)
    reseed(PerRank(other), 5)
    assert wrapped.generator.random() == other.generator.random()


def test_reseeding_what_is_not_a_generator_is_refused():
    """reseed of a non-generator, or an adapter without reseeding, raises TypeError."""
    with pytest.raises(TypeError, match="dict is not a random generator"):
        reseed({}, 1)

    class Some(Adapter):
        name = "example.Some"

        def matches(self, obj):
            return False

        def save(self, obj):
            return {}

    with pytest.raises(TypeError, match=r"example\.Some objects cannot be re-seeded"):
        Some().reseed(object(), 1)


@pytest.mark.parametrize("seed", [-1, 2.0, True, "1"])
def test_generator_state_reseed_checks_its_seed(seed):
    """GeneratorState.reseed names a bad seed."""
    with pytest.raises(ConfigError, match=r"`seed` must be an int >= 0"):
        GeneratorState(np.random.default_rng()).reseed(seed)


def test_derived_seeds_differ_by_rank_step_and_entropy():
    """derived_seed is a pure function of its inputs, 64 bits, and each input matters."""
    base = derived_seed([7], rank=1, step=40)
    assert base == derived_seed([7], rank=1, step=40)
    assert 0 <= base < 2**64
    others = {
        derived_seed([7], rank=0, step=40),
        derived_seed([7], rank=1, step=41),
        derived_seed([8], rank=1, step=40),
    }
    assert base not in others
    assert len(others) == 3


def _restore_as(manager, rank, world, template, **kwargs):
    """Restores as rank ``rank`` of ``world`` (what a distributed manager's group says)."""
    manager._reading._ranks = lambda: (rank, world)
    return manager.restore(template, **kwargs)


def test_one_copy_restored_on_several_ranks_is_reseeded_per_rank(tmp_path):
    """A checkpoint of one process holds one copy of each generator: restored on 2 ranks,
    each rank's generators are re-seeded (its own stream, the same at every such restore)
    with one WorldSizeWarning saying 1 -> 2, and the rest restored as saved."""
    with CheckpointManager(tmp_path) as manager:
        manager.save(7, {"w": np.arange(3.0), "g": np.random.default_rng(1), "r": random.Random(1)})
    draws = {}
    for rank in (0, 1, 0):
        template = {"w": np.zeros(3), "g": np.random.default_rng(0), "r": random.Random(0)}
        manager = CheckpointManager(tmp_path, read_only=True)
        with pytest.warns(WorldSizeWarning) as caught:
            _restore_as(manager, rank, 2, template)
        assert len(caught) == 1
        message = str(caught[0].message)
        assert "saved as one copy (by one process, or before globalstep saved it per rank)" in (
            message
        )
        assert "restored on 2 ranks (1 -> 2)" in message
        assert "The random generators g, r were re-seeded" in message
        assert template["w"].tolist() == [0.0, 1.0, 2.0]
        seen = (template["g"].random(), template["r"].random())
        assert draws.setdefault(rank, seen) == seen
    assert draws[0][0] != draws[1][0]
    assert draws[0][1] != draws[1][1]
    assert draws[0][0] != np.random.default_rng(1).random()


def test_one_copy_restored_on_one_process_is_as_before(tmp_path):
    """On one rank the same checkpoint restores as saved, with no warning."""
    with CheckpointManager(tmp_path) as manager:
        manager.save(7, {"g": np.random.default_rng(1)})
        template = {"g": np.random.default_rng(0)}
        _restore_as(manager, 0, 1, template)
    assert template["g"].random() == np.random.default_rng(1).random()


def test_one_copy_of_a_marked_array_on_several_ranks_is_named(tmp_path):
    """A marked array of a one-process checkpoint, restored on 2 ranks: WorldSizeError."""
    with CheckpointManager(tmp_path) as manager:
        manager.save(7, {"seen": np.ones(2), "g": np.random.default_rng(1)})
    template = {"seen": PerRank(np.zeros(2)), "g": np.random.default_rng(0)}
    manager = CheckpointManager(tmp_path, read_only=True)
    with pytest.raises(
        WorldSizeError,
        match=r"'seen' \(ndarray\) of checkpoint step 7 was saved as one copy .* restored on "
        r"2 ranks: .*Restore on 1 rank, ",
    ):
        _restore_as(manager, 1, 2, template)
    assert template["seen"].value.tolist() == [0.0, 0.0]  # nothing restored


def test_a_remappable_leaf_gets_the_one_copy(tmp_path):
    """An object with load_state_from_ranks gets the one copy as the only old rank's."""

    class Position:
        globalstep_per_rank = True

        def __init__(self):
            self.value, self.got = 5, None

        def state_dict(self):
            return {"position": self.value}

        def load_state_dict(self, state):
            raise AssertionError("remapped, not loaded")

        def load_state_from_ranks(self, states, *, rank, world_size, step):
            self.got = (states, rank, world_size, step)

    with CheckpointManager(tmp_path) as manager:
        manager.save(3, {"p": Position()})
    template = {"p": Position()}
    _restore_as(CheckpointManager(tmp_path, read_only=True), 1, 4, template)
    assert template["p"].got == ([{"position": 5}], 1, 4, 3)
