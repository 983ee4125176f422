"""follow(): a clock kept at optimizer.iterations in custom training loops.

In-process checks run on the TensorFlow backend (eager and tf.function GradientTape
loops); keras_follow_check.py runs the eager loops on every Keras backend, one subprocess
each.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from keras_subprocess import run_on_backend

from globalstep import Clock, ConfigError, StepError

keras = pytest.importorskip("keras")
gk = pytest.importorskip("globalstep.integrations.keras")

SCRIPT = Path(__file__).with_name("keras_follow_check.py")


def _tf():
    if keras.backend.backend() != "tensorflow":
        pytest.skip("the tf.function loop needs the TensorFlow backend")
    return pytest.importorskip("tensorflow")


def _model():
    keras.utils.set_random_seed(0)
    return keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(4, "relu"), keras.layers.Dense(1)]
    )


def _tape_loop(tf, optimizer, batches, *, compiled, poison=()):
    """A GradientTape loop; batches listed in ``poison`` get an infinite loss."""
    model = _model()
    clock = Clock()
    optimizer.build(model.trainable_variables)
    follower = gk.follow(optimizer, clock)
    x = tf.constant(np.random.default_rng(0).normal(size=(8, 3)).astype("float32"))

    def step(scale):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x) ** 2) * scale
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))

    if compiled:
        step = tf.function(step)
    steps = []
    for i in range(batches):
        step(tf.constant(np.inf if i in poison else 1.0, tf.float32))
        follower()
        steps.append((clock.step, int(optimizer.iterations.numpy())))
    return steps


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf.function"])
def test_clock_follows_iterations_in_a_gradient_tape_loop(compiled):
    """One tick per apply_gradients, eager and in tf.function: step k after update k."""
    tf = _tf()
    steps = _tape_loop(tf, keras.optimizers.Adam(1e-3), 5, compiled=compiled)
    assert steps == [(k, k) for k in range(1, 6)]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf.function"])
def test_an_update_the_loss_scale_optimizer_skips_does_not_tick(compiled):
    """Non-finite gradients: LossScaleOptimizer skips the update and the clock stays."""
    tf = _tf()
    opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.01))
    steps = _tape_loop(tf, opt, 6, compiled=compiled, poison={1, 3, 4})
    assert [s for s, _ in steps] == [1, 1, 2, 2, 2, 3]
    assert all(s == i for s, i in steps)


def test_read_gives_iterations_without_ticking():
    """Follower.read() is optimizer.iterations now; only the call ticks the clock."""
    w = keras.Variable(np.zeros(2, "float32"))
    opt = keras.optimizers.SGD(0.1)
    clock = Clock()
    follower = gk.follow(opt, clock)
    opt.apply([keras.ops.ones(2)], [w])
    opt.apply([keras.ops.ones(2)], [w])
    assert (follower.read(), clock.step) == (2, 0)
    assert (follower(), clock.step) == (2, 2)


def test_one_tick_per_gradient_accumulation_steps():
    """With gradient_accumulation_steps=3, seven micro-batches are two updates."""
    tf = _tf()
    opt = keras.optimizers.SGD(0.01, gradient_accumulation_steps=3)
    steps = _tape_loop(tf, opt, 7, compiled=True)
    assert [s for s, _ in steps] == [0, 0, 1, 1, 1, 2, 2]
    assert all(s == i for s, i in steps)


def test_refuses_inside_tf_function():
    """Called inside the traced step, it raises instead of ticking once at tracing."""
    tf = _tf()
    w = keras.Variable(np.zeros(2, "float32"))
    opt = keras.optimizers.SGD(0.1)
    opt.build([w])
    follower = gk.follow(opt, Clock())

    @tf.function
    def step():
        opt.apply([tf.ones(2)], [w])
        follower()

    with pytest.raises(Exception, match="must be called outside a traced function"):
        step()  # autograph wraps the ConfigError in its StagingError, message kept
    with pytest.raises(ConfigError, match="must be called outside a traced function"):
        tf.function(step.python_function, autograph=False)()
    with pytest.raises(ConfigError, match="`iterations` must be a concrete integer"):
        tf.function(lambda: follower(opt.iterations.value + 0), autograph=False)()


def test_explicit_iterations_and_a_counter_that_went_back():
    """A value passed in is followed; a count lower than the clock's is an error."""
    w = keras.Variable(np.zeros(2, "float32"))
    opt = keras.optimizers.SGD(0.1)
    opt.build([w])
    clock = Clock()
    follower = gk.follow(opt, clock)
    assert follower(np.int32(4)) == 4  # a value the loop holds
    assert clock.step == 4
    with pytest.raises(StepError, match=r"optimizer\.iterations is 2 but the clock"):
        follower(2)
    for bad in (True, 1.5, np.zeros(2, "int32")):
        with pytest.raises(ConfigError, match="`iterations` must be"):
            follower(bad)


def test_follow_checks_its_arguments():
    """A non-optimizer, a non-clock and a clock at another step are refused."""
    w = keras.Variable(np.zeros(2, "float32"))
    opt = keras.optimizers.SGD(0.1)
    opt.build([w])
    with pytest.raises(ConfigError, match="`optimizer` must be a Keras optimizer"):
        gk.follow(object(), Clock())
    with pytest.raises(ConfigError, match="`clock` must be a globalstep Clock"):
        gk.follow(opt, 0)
    clock = Clock()
    clock.tick(3)
    with pytest.raises(StepError, match=r"is at step 3 but optimizer\.iterations is 0"):
        gk.follow(opt, clock)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["tensorflow", "jax", "torch"])
def test_every_keras_backend(backend):
    """Plain, LossScaleOptimizer and accumulating loops on each backend keep step == iterations."""
    report = run_on_backend(SCRIPT, backend)
    assert report["backend"] == backend
    assert report["plain"] == [[k, k, k] for k in range(1, 6)]
    assert [s for s, _, _ in report["loss_scale"]] == [1, 1, 2, 2, 2, 3]
    assert [s for s, _, _ in report["accumulate"]] == [0, 0, 1, 1, 1, 2, 2]
    for name in ("loss_scale", "accumulate"):
        assert all(s == i == r for s, i, r in report[name]), name


def test_stateless_reads_the_iteration_entry():
    """stateless() reads the counter from returned optimizer variables, accumulation minded."""
    w = keras.Variable(np.zeros(2, "float32"))
    opt = keras.optimizers.SGD(0.1, gradient_accumulation_steps=2)
    opt.build([w])
    clock = Clock()
    follower = gk.follow(opt, clock)
    for _ in range(5):
        opt.apply([keras.ops.ones(2)], [w])  # stateless_apply is JAX's: its values, by hand
    state = [v.value.numpy() for v in opt.variables]
    assert follower.stateless(state) == 2
    assert clock.step == 2
    with pytest.raises(ConfigError, match="`optimizer_variables` must hold one value per"):
        follower.stateless(state[:-1])


# ------------------------------------------------ one owner of the clock's ticks (issue 33)


def _sgd():
    """A one-variable SGD, built: ``_apply(opt, w)`` applies one update."""
    w = keras.Variable(np.zeros(2, "float32"))
    opt = keras.optimizers.SGD(0.1)
    opt.build([w])
    return w, opt


def _apply(opt, w):
    opt.apply([keras.ops.ones(2)], [w])


def _train_with_run(directory, until, *, total_steps=6):
    """A Run-based custom loop: the follower ticks, run.update logs and saves; stops
    after the update that reaches ``until`` (a resumed call continues from the checkpoint)."""
    import io

    from globalstep import Run

    w, opt = _sgd()
    run = Run(
        directory,
        total_steps=total_steps,
        save_every=2,
        progress=False,
        stream=io.StringIO(),
        writer_options={"formats": ("jsonl",)},
    )
    seen = []
    with run:
        run.restore({"w": w, "opt": opt})
        follower = gk.follow(opt, run.clock)  # after restore: both at the checkpoint's step
        while not run.done and run.step < until:
            _apply(opt, w)
            follower()
            run.update(loss=float(w.numpy()[0]))
            seen.append((run.step, int(follower.read())))
    return run, seen, w


def test_run_beside_follow_ticks_once_per_update(tmp_path):
    """follow() owns the clock's tick: run.update after follower() does not tick again (on
    today's main it raised "ticked elsewhere"). Each update is one step, equal to
    optimizer.iterations; each step 1..6 is logged once; the checkpoints are at 2, 4, 6,
    and a run resumed from step 4 follows on from there."""
    from globalstep.summary import read_run

    run, seen, _ = _train_with_run(tmp_path, until=4)
    assert seen == [(k, k) for k in range(1, 5)]
    assert run.checkpoints.steps() == [2, 4]
    run, seen, w = _train_with_run(tmp_path, until=6)  # resumed: w and opt restored at 4
    assert seen == [(5, 5), (6, 6)]
    assert run.checkpoints.steps() == [2, 4, 6]
    points = read_run(tmp_path / "logs").scalars["loss"]
    assert [p.step for p in points] == list(range(1, 7))
    assert [p.value for p in points] == pytest.approx([-0.1 * k for k in range(1, 7)])
    assert w.numpy().tolist() == pytest.approx([-0.6, -0.6])


def test_follow_claims_the_clock_while_the_follower_lives():
    """The claim lives as long as the follower (the loop keeps it to call it) and ends with
    detach() or when the follower is dropped; the clock's owner names the optimizer."""
    import gc

    _, opt = _sgd()
    clock = Clock()
    follower = gk.follow(opt, clock)
    gc.collect()
    assert clock.tick_owner == f"Keras optimizer SGD at {id(opt):#x}, via follow()"
    assert gk.Follower.of(clock) is follower
    assert follower.attached
    del follower
    assert clock.tick_owner is None
    assert gk.Follower.of(clock) is None
    follower = gk.follow(opt, clock)
    follower.detach()
    assert clock.tick_owner is None
    assert not follower.attached
    assert repr(follower).endswith(", detached)")


def test_second_follow_of_a_clock_is_refused_naming_the_first():
    """A second follow() of a followed clock (a notebook cell run twice, a second
    optimizer) is refused with a message naming the first follower; the first keeps its
    claim. The same optimizer may drive another clock (a follower only reads it)."""
    _, opt = _sgd()
    _, other = _sgd()
    clock = Clock()
    first = gk.follow(opt, clock)
    for optimizer in (opt, other):
        with pytest.raises(ConfigError, match="`clock` is followed already") as err:
            gk.follow(optimizer, clock)
        assert repr(first) in str(err.value)
        assert "Follower.of(clock).detach()" in str(err.value)
    assert f"SGD at {id(opt):#x}" in repr(first)
    assert repr(first).endswith(", following)")
    assert gk.Follower.of(clock) is first
    assert "via follow()" in (clock.tick_owner or "")
    second = gk.follow(opt, Clock("eval"))
    assert second is not first
    assert gk.Follower.of(clock) is first


def test_detach_then_follow_again():
    """detach() ends the claim; the detached follower refuses to tick (the clock's ticks
    are no longer its own) and a second detach is an error; follow() again works and
    ticks from where the clock is."""
    w, opt = _sgd()
    clock = Clock()
    first = gk.follow(opt, clock)
    _apply(opt, w)
    assert first() == 1
    first.detach()
    with pytest.raises(ConfigError, match="`follower` is already detached"):
        first.detach()
    _apply(opt, w)
    with pytest.raises(ConfigError, match="`follower` must be attached to tick the clock"):
        first()
    assert (first.read(), clock.step) == (2, 1)  # read() still reads
    clock.tick()
    second = gk.follow(opt, clock)
    assert gk.Follower.of(clock) is second
    _apply(opt, w)
    assert (second(), clock.step) == (3, 3)


def test_follow_refuses_a_clock_another_owner_ticks():
    """A clock whose ticks another owner claimed (a loop, a torch attach) is refused, and
    the refused follow() leaves nothing behind."""
    _, opt = _sgd()
    clock = Clock()
    clock.claim_ticks("my loop")
    with pytest.raises(ConfigError, match="is ticked already by my loop"):
        gk.follow(opt, clock)
    assert gk.Follower.of(clock) is None
    assert clock.tick_owner == "my loop"
