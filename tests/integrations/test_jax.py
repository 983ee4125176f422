"""Tests for globalstep.integrations.jax: JAX arrays and pytrees in checkpoints, optax's
counts against the clock, core schedules traced under jit."""

from __future__ import annotations

import dataclasses
import warnings
from typing import NamedTuple

import numpy as np
import pytest

from globalstep import Clock, ConfigError, RestoreMismatchError, StepError
from globalstep.checkpoint import CheckpointManager
from globalstep.schedules import CosineDecay, Linear

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    optax = pytest.importorskip("optax")
gj = pytest.importorskip("globalstep.integrations.jax")


def round_trip(tmp_path, tree, template=None):
    """Saves ``tree`` at step 1 and restores it (against ``template`` if given)."""
    with CheckpointManager(tmp_path / "ckpt") as manager:
        manager.save(1, tree)
        return manager.restore(template)


def same_bits(a, b):
    """True when two arrays have the same dtype, shape and bytes."""
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_jax_arrays_come_back_as_jax_arrays_with_their_dtypes(tmp_path):
    """jax.Array leaves (float32, bfloat16, int32) come back as jax.Arrays, bit for bit."""
    tree = {
        "f": jnp.linspace(0, 1, 5),
        "bf": jnp.arange(4, dtype=jnp.bfloat16) / 3,
        "i": jnp.arange(3, dtype=jnp.int32),
    }
    restored = round_trip(tmp_path, tree)
    for key, value in tree.items():
        assert isinstance(restored[key], jax.Array)
        assert same_bits(restored[key], value), key


def test_weak_type_is_kept(tmp_path):
    """A weakly typed scalar (a Python float in JAX) comes back weakly typed."""
    restored = round_trip(tmp_path, {"lr": jnp.asarray(0.1), "n": jnp.float32(0.1)})
    assert restored["lr"].weak_type
    assert not restored["n"].weak_type


def test_prng_keys_round_trip(tmp_path):
    """Typed PRNG keys and raw uint32 keys come back as keys that draw the same numbers."""
    key, raw = jax.random.key(7), jax.random.PRNGKey(7)
    restored = round_trip(tmp_path, {"key": key, "raw": raw})
    assert same_bits(jax.random.normal(restored["key"], (3,)), jax.random.normal(key, (3,)))
    assert same_bits(restored["raw"], raw)


def test_template_gives_its_placement(tmp_path):
    """Restored against a template, each array is placed with the template's sharding."""
    device = jax.devices()[-1]
    template = {"w": jax.device_put(jnp.zeros(3), device)}
    restored = round_trip(tmp_path, {"w": jnp.ones(3)}, template)
    assert restored["w"].sharding == template["w"].sharding
    assert same_bits(restored["w"], jnp.ones(3))


def test_optax_state_keeps_its_types_with_a_template(tmp_path):
    """An optax state restored against a template has the template's namedtuple types and
    pytree structure, with the saved values."""
    opt = optax.adamw(0.1)
    params = {"w": jnp.ones(3)}
    state = opt.init(params)
    _, trained = opt.update({"w": jnp.full(3, 0.5)}, state, params)
    restored = round_trip(tmp_path, {"opt": trained}, {"opt": state})["opt"]
    assert jax.tree.structure(restored) == jax.tree.structure(trained)
    assert type(restored[0]) is type(trained[0])
    for a, b in zip(jax.tree.leaves(restored), jax.tree.leaves(trained), strict=True):
        assert same_bits(a, b)


def test_namedtuple_field_names_without_a_template(tmp_path):
    """Without a template an optax state comes back as namedtuples with the same type
    names and field names."""
    state = optax.adam(0.1).init({"w": jnp.ones(2)})
    restored = round_trip(tmp_path, {"opt": state})["opt"]
    assert type(restored[0]).__name__ == "ScaleByAdamState"
    assert restored[0]._fields == ("count", "mu", "nu")
    assert same_bits(restored[0].mu["w"], state[0].mu["w"])


def test_multisteps_state_round_trips(tmp_path):
    """optax.MultiSteps' state (mini_step, gradient_step, inner state) round-trips."""
    opt = optax.MultiSteps(optax.adam(0.1), every_k_schedule=3)
    params = {"w": jnp.ones(2)}
    state = opt.init(params)
    _, state = opt.update({"w": jnp.ones(2)}, state, params)
    restored = round_trip(tmp_path, {"opt": state}, {"opt": opt.init(params)})["opt"]
    assert int(restored.mini_step) == 1
    assert type(restored) is type(state)


@dataclasses.dataclass(frozen=True)
class Frozen:
    """A frozen dataclass standing for a flax struct."""

    w: object
    step: object


Frozen.__module__ = "flax.example"  # a dataclass of JAX's libraries (flax is not installed)


def test_frozen_dataclass_round_trips(tmp_path):
    """A frozen dataclass of JAX's libraries (a flax struct) comes back as the template's
    type; without a template, as a namedtuple with its field names."""
    value = Frozen(jnp.arange(3.0), jnp.int32(4))
    restored = round_trip(tmp_path, {"s": value}, {"s": Frozen(jnp.zeros(3), jnp.int32(0))})
    assert type(restored["s"]) is Frozen
    assert same_bits(restored["s"].w, value.w)
    assert int(restored["s"].step) == 4
    plain = round_trip(tmp_path / "plain", {"s": value})["s"]
    assert plain._fields == ("w", "step")
    assert type(plain).__name__ == "Frozen"


def test_read_only_numpy_view_of_a_jax_array_is_refused_clearly(tmp_path):
    """A template made with np.asarray(jax_array) cannot be filled in place: the restore
    raises and says to pass the jax.Array itself."""
    with pytest.raises(RestoreMismatchError, match=r"read-only view .* pass the jax.Array"):
        round_trip(tmp_path, {"w": np.ones(3, np.float32)}, {"w": np.asarray(jnp.zeros(3))})


def test_check_optax_count_agrees():
    """Counts equal to the clock's step pass."""
    opt = optax.adam(0.1)
    params = jnp.ones(2)
    state = opt.init(params)
    _, state = opt.update(jnp.ones(2), state, params)
    clock = Clock("train")
    clock.tick()
    gj.check_optax_count(state, clock)


def test_check_optax_count_names_both():
    """A count that differs from the clock raises, naming the count, its path and the
    clock."""
    state = optax.adam(0.1).init(jnp.ones(2))
    clock = Clock("generator")
    clock.tick(2)
    with pytest.raises(
        StepError, match=r"`count` at 0/count is 0, but clock 'generator' is at step 2"
    ):
        gj.check_optax_count(state, clock)


def test_check_multisteps_mini_step():
    """Under MultiSteps the gradient step follows the clock and the mini step the
    micro-batches; a wrong mini step raises naming both."""
    opt = optax.MultiSteps(optax.sgd(0.1), every_k_schedule=4)
    params = jnp.ones(2)
    state = opt.init(params)
    for _ in range(5):
        _, state = opt.update(jnp.ones(2), state, params)
    gj.check_optax_count(state, 1, micro_steps=5, every_k=4)
    with pytest.raises(StepError, match=r"`mini_step` at mini_step is 1, but 6 micro-batches"):
        gj.check_optax_count(state, 1, micro_steps=6, every_k=4)
    with pytest.raises(StepError, match=r"`gradient_step` at gradient_step is 1, but step=2"):
        gj.check_optax_count(state, 2)


def test_check_optax_count_wants_both_micro_arguments():
    """micro_steps without every_k is refused."""
    with pytest.raises(ConfigError, match="`micro_steps` must be given together with every_k"):
        gj.check_optax_count((), 0, micro_steps=3)


@pytest.mark.parametrize(
    "schedule", [Linear(0.0, 1.0, 10), CosineDecay(0.1, 100, dtype="float32")], ids=["64", "32"]
)
def test_traceable_core_schedule_under_jit(schedule):
    """A core schedule made traceable gives its own values under jax.jit and vmap."""
    fn = gj.traceable(schedule)
    counts = jnp.arange(0, 120, 7)
    expected = schedule.values(np.arange(0, 120, 7)).astype(np.float32)
    assert same_bits(jax.jit(jax.vmap(fn))(counts), expected)
    assert same_bits(jax.jit(fn)(7), expected[1])


def test_traceable_core_schedule_in_optax():
    """optax.sgd with a traceable core schedule applies its rate under jit."""
    opt = optax.sgd(gj.traceable(Linear(1.0, 0.0, 4)))
    params = jnp.zeros(1)
    state = opt.init(params)
    update = jax.jit(opt.update)
    steps = []
    for _ in range(3):
        u, state = update(jnp.ones(1), state, params)
        steps.append(float(u[0]))
    assert steps == [-1.0, -0.75, -0.5]


def test_traceable_refuses_other_callables():
    """traceable() takes globalstep schedules only, and says compat ones need no wrapping."""
    with pytest.raises(ConfigError, match="`schedule` must be a globalstep schedule"):
        gj.traceable(lambda c: 0.1)


class Local(NamedTuple):
    """A namedtuple of the user's own module."""

    a: object


def test_user_namedtuple_is_a_plain_tuple_still(tmp_path):
    """A namedtuple of the user's own module (not a JAX library's) comes back as a tuple:
    only JAX's libraries' types are adapted."""
    restored = round_trip(tmp_path, {"t": Local(np.ones(2))})
    assert isinstance(restored["t"], tuple)
    assert not hasattr(restored["t"], "_fields")
