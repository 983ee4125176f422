"""globalstep.compat.tf.summary: tf.summary's scalar logging keyed by the global step."""

from __future__ import annotations

import numpy as np
import pytest

from globalstep import Clock, ConfigError
from globalstep.compat import _tf_summary
from globalstep.compat import tf as ctf
from globalstep.summary import read_run

summary = ctf.summary


def _steps(logdir, tag="loss"):
    return [(p.step, p.value) for p in read_run(logdir).scalars[tag]]


def _events(logdir):
    """{tag: [(step, value)]} as TensorBoard's EventAccumulator loads them."""
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    acc = ea.EventAccumulator(str(logdir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    out = {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}
    from tensorboard.util import tensor_util

    for t in acc.Tags().get("tensors", []):  # tf.summary v2 writes scalars as tensors
        out[t] = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(t)]
    return out


def test_compat_tf_offers_summary():
    """The renamed import reaches it: globalstep.compat.tf.summary."""
    assert summary is _tf_summary
    assert "summary" in ctf.__all__


def test_step_none_takes_the_writer_clock(tmp_path):
    """With a clock and no step given, the step after each tick, as the project logs."""
    clock = Clock()
    writer = summary.create_file_writer(tmp_path, clock=clock, formats=("jsonl",))
    with writer.as_default():
        for _ in range(4):
            clock.tick()
            assert summary.scalar("loss", float(clock.step))
    writer.close()
    assert _steps(tmp_path) == [(k, float(k)) for k in range(1, 5)]


def test_default_steps_as_default_and_set_step(tmp_path):
    """as_default(step=clock) is read at each call; experimental.set_step wins over it;
    an explicit step wins over both."""
    clock = Clock()
    writer = summary.create_file_writer(tmp_path, formats=("jsonl",))
    with writer.as_default(step=clock):
        clock.tick()
        summary.scalar("loss", 1.0)
        clock.tick()
        summary.scalar("loss", 2.0)
        summary.experimental.set_step(np.int64(5))
        assert summary.experimental.get_step() == 5
        summary.scalar("loss", 5.0)
        summary.scalar("loss", 7.0, step=7)
        summary.experimental.set_step(None)
    writer.close()
    assert _steps(tmp_path) == [(1, 1.0), (2, 2.0), (5, 5.0), (7, 7.0)]


def test_same_curve_as_tf_summary_with_optimizer_iterations(tmp_path):
    """A GradientTape loop in tf.function logging step=optimizer.iterations after
    apply_gradients: the same steps and values as TensorFlow's own tf.summary.scalar."""
    tf = pytest.importorskip("tensorflow")
    keras = pytest.importorskip("keras")
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    opt = keras.optimizers.SGD(0.05)
    x = tf.constant(np.random.default_rng(0).normal(size=(16, 3)).astype("float32"))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    ours = summary.create_file_writer(tmp_path / "ours")
    theirs = tf.summary.create_file_writer(str(tmp_path / "theirs"))
    for _ in range(6):
        loss = step()
        with ours.as_default():
            summary.scalar("loss", loss, step=opt.iterations)
        with theirs.as_default():
            tf.summary.scalar("loss", loss, step=opt.iterations)
    ours.close()
    theirs.close()
    mine = _events(tmp_path / "ours")["loss"]
    assert [s for s, _ in mine] == [1, 2, 3, 4, 5, 6]
    assert mine == _events(tmp_path / "theirs")["loss"]


def test_a_resumed_run_shows_each_step_once(tmp_path):
    """Logged to step 9, resumed from a checkpoint at step 5: TensorBoard holds 1..12 once,
    with the resumed run's values from step 6 on."""
    clock = Clock()
    writer = summary.create_file_writer(tmp_path, clock=clock)
    with writer.as_default():
        for _ in range(9):
            clock.tick()
            summary.scalar("loss", 1.0)
    writer.close()  # (the crashed attempt's points reached disk)
    resumed = Clock()
    resumed.tick(5)  # restored from the checkpoint of step 5
    writer = summary.create_file_writer(tmp_path, clock=resumed)
    with writer.as_default():
        for _ in range(7):
            resumed.tick()
            summary.scalar("loss", 2.0)
    writer.close()
    expected = [(k, 1.0 if k <= 5 else 2.0) for k in range(1, 13)]
    assert _events(tmp_path)["loss"] == expected
    assert _steps(tmp_path) == expected


def test_refused_inside_tf_function(tmp_path):
    """In a traced function it raises instead of logging once at tracing."""
    tf = pytest.importorskip("tensorflow")
    writer = summary.create_file_writer(tmp_path, formats=("jsonl",))

    def traced():
        with writer.as_default():
            summary.scalar("loss", 1.0, step=1)
        return 0

    with pytest.raises(ConfigError, match=r"`scalar` must be called outside tf\.function"):
        tf.function(traced, autograph=False)()
    writer.close()


def test_no_default_writer_returns_false_and_warns_once(monkeypatch):
    """As TensorFlow, False without a default writer; and a warning, once."""
    monkeypatch.setattr(_tf_summary, "_warned_no_writer", False)
    with pytest.warns(UserWarning, match="wrote nothing: there is no default writer"):
        assert summary.scalar("loss", 1.0, step=1) is False
    assert summary.scalar("loss", 1.0, step=2) is False  # no second warning (errors here)


def test_no_step_anywhere(tmp_path):
    """No step, no default step, no clock: an error saying where a step comes from."""
    writer = summary.create_file_writer(tmp_path, formats=("jsonl",))
    with writer.as_default(), pytest.raises(ConfigError, match="`step` must be given"):
        summary.scalar("loss", 1.0)
    writer.close()


@pytest.mark.parametrize(
    ("step", "match"),
    [
        (1.5, "`step` must be an int, a Clock"),
        (True, "`step` must be an int, a Clock"),
        (np.zeros(2, "int64"), "`step` must be a 0-d integer"),
        (np.float32(3), "`step` must be a 0-d integer"),
        (-1, "step"),
    ],
)
def test_bad_steps(tmp_path, step, match):
    """A step that is not a non-negative integer is refused."""
    writer = summary.create_file_writer(tmp_path, formats=("jsonl",))
    with writer.as_default(), pytest.raises(ConfigError, match=match):
        summary.scalar("loss", 1.0, step=step)
    writer.close()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_queue": 10}, "`max_queue` must be None here"),
        ({"filename_suffix": ".v2"}, "`filename_suffix` must be None here"),
        ({"experimental_trackable": True}, "`experimental_trackable` must be False here"),
        ({"flush_millis": "1s"}, "`flush_millis` must be a number of milliseconds"),
        ({"flush_millis": 0}, "`flush_seconds` must be a finite number > 0"),
    ],
)
def test_create_file_writer_refuses_what_it_cannot_honour(tmp_path, kwargs, match):
    """TensorFlow's arguments this writer does not honour are refused, not ignored."""
    with pytest.raises(ConfigError, match=match):
        summary.create_file_writer(tmp_path, **kwargs)


def test_description_refused_and_flush(tmp_path):
    """A description is refused; flush() writes the default writer's queue."""
    writer = summary.create_file_writer(tmp_path, formats=("jsonl",), flush_millis=60_000)
    with writer.as_default():
        with pytest.raises(ConfigError, match="`description` must be None"):
            summary.scalar("loss", 1.0, step=1, description="the loss")
        summary.scalar("loss", 3.0, step=3)
        summary.flush()
        assert _steps(tmp_path) == [(3, 3.0)]
    writer.close()
