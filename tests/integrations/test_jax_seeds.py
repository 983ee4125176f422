"""The seeds' programs in JAX: the exponential decay over 2 epochs of 12 batches, and a GAN
with two clocks (critic 5 updates per generator update)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from globalstep import Clock, StepError
from globalstep.checkpoint import CheckpointManager
from globalstep.compat import optax as co

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    optax = pytest.importorskip("optax")
gj = pytest.importorskip("globalstep.integrations.jax")


def tf_rates(steps):
    """TensorFlow's tf.compat.v1.train.exponential_decay(1.0, step, 100000, 0.96) rates."""
    tf = pytest.importorskip("tensorflow")
    return np.array(
        [
            tf.compat.v1.train.exponential_decay(
                1.0, tf.Variable(s, dtype=tf.int32), 100000, 0.96
            )().numpy()
            for s in steps
        ],
        dtype=np.float32,
    )


def test_seed_exponential_decay_over_two_epochs_equals_tensorflow():
    """1,200 rows in batches of 100 for 2 epochs: a jitted optax SGD step with the compat
    exponential decay uses at steps 0..23 exactly TensorFlow's rates, and the clock ends at
    step 24, epoch 2."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1200, 5)).astype(np.float32)
    y = (x.sum(axis=1) > 0).astype(np.int32)
    schedule = co.exponential_decay(1.0, 100000, 0.96)
    opt = optax.inject_hyperparams(optax.sgd)(learning_rate=schedule)
    params = {"w": jnp.zeros((5, 2)), "b": jnp.zeros(2)}
    state = opt.init(params)
    clock = Clock("global_step", steps_per_epoch=12, batch_size=100)

    @jax.jit
    def step(p, s, xb, yb):
        def loss(q):
            logits = xb @ q["w"] + q["b"]
            return optax.softmax_cross_entropy_with_integer_labels(logits, yb).mean()

        updates, s = opt.update(jax.grad(loss)(p), s, p)
        return optax.apply_updates(p, updates), s

    used = []
    for _epoch in range(2):
        for start in range(0, 1200, 100):
            params, state = step(params, state, x[start : start + 100], y[start : start + 100])
            used.append(np.asarray(state.hyperparams["learning_rate"]))
            clock.tick()
            gj.check_optax_count(state, clock)
        clock.end_epoch()
    assert (clock.step, clock.epoch) == (24, 2)
    expected = tf_rates(range(24))
    np.testing.assert_array_equal(
        np.array(used, np.float32).view(np.uint32), expected.view(np.uint32)
    )


def test_gan_with_two_clocks(tmp_path):
    """A WGAN whose critic updates 5 times per generator update keeps two clocks that follow
    their own optimizers' counts; each optimizer's rate follows its own clock; both clocks
    and states round-trip through one checkpoint."""
    critic_lr = co.exponential_decay(5e-4, 10, 0.9, staircase=True)
    gen_lr = co.warmup_cosine_decay_schedule(0.0, 1e-3, 2, 20)
    c_opt = optax.inject_hyperparams(optax.rmsprop)(learning_rate=critic_lr)
    g_opt = optax.inject_hyperparams(optax.rmsprop)(learning_rate=gen_lr)
    critic = {"w": jnp.full((1, 8), 0.1), "v": jnp.full((8, 1), 0.1)}
    gen = {"w": jnp.full((2, 1), 0.5), "b": jnp.zeros(1)}
    c_state, g_state = c_opt.init(critic), g_opt.init(gen)
    critic_clock, gen_clock = Clock("critic"), Clock("generator")
    key = jax.random.key(0)

    def score(c, x):
        return jnp.tanh(x @ c["w"]) @ c["v"]

    def fake(g, z):
        return z @ g["w"] + g["b"]

    @jax.jit
    def critic_step(c, s, g, key):
        k1, k2 = jax.random.split(key)
        real = 2.0 + jax.random.normal(k1, (64, 1))
        z = jax.random.normal(k2, (64, 2))

        def loss(q):
            return score(q, fake(g, z)).mean() - score(q, real).mean()

        updates, s = c_opt.update(jax.grad(loss)(c), s, c)
        c = optax.apply_updates(c, updates)
        return jax.tree.map(lambda w: jnp.clip(w, -0.5, 0.5), c), s

    @jax.jit
    def gen_step(g, s, c, key):
        z = jax.random.normal(key, (64, 2))
        updates, s = g_opt.update(jax.grad(lambda q: -score(c, fake(q, z)).mean())(g), s, g)
        return optax.apply_updates(g, updates), s

    critic_rates, gen_rates = [], []
    for _ in range(6):
        for _ in range(5):
            key, sub = jax.random.split(key)
            critic, c_state = critic_step(critic, c_state, gen, sub)
            critic_rates.append(np.asarray(c_state.hyperparams["learning_rate"]))
            critic_clock.tick()
        key, sub = jax.random.split(key)
        gen, g_state = gen_step(gen, g_state, critic, sub)
        gen_rates.append(np.asarray(g_state.hyperparams["learning_rate"]))
        gen_clock.tick()
        gj.check_optax_count(c_state, critic_clock)
        gj.check_optax_count(g_state, gen_clock)
    assert (critic_clock.step, gen_clock.step) == (30, 6)
    jitted = jax.jit(jax.vmap(lambda c: jnp.asarray(critic_lr(c), jnp.float32)))
    np.testing.assert_array_equal(np.array(critic_rates), np.asarray(jitted(jnp.arange(30))))
    jitted = jax.jit(jax.vmap(lambda c: jnp.asarray(gen_lr(c), jnp.float32)))
    np.testing.assert_array_equal(np.array(gen_rates), np.asarray(jitted(jnp.arange(6))))
    with CheckpointManager(tmp_path / "ckpt") as manager:
        manager.save(
            gen_clock.step, {"clocks": [critic_clock, gen_clock], "c": c_state, "g": g_state}
        )
        fresh = [Clock("critic"), Clock("generator")]
        tree = manager.restore({"clocks": fresh, "c": c_opt.init(critic), "g": g_opt.init(gen)})
    assert (fresh[0].step, fresh[1].step) == (30, 6)
    gj.check_optax_count(tree["c"], fresh[0])
    gj.check_optax_count(tree["g"], fresh[1])
    with pytest.raises(StepError, match=r"`count` at count is 6, but clock 'critic' is at step 30"):
        gj.check_optax_count(tree["g"], fresh[0])
