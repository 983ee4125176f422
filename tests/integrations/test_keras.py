"""Tests for globalstep.integrations.keras in this process (Keras' default backend here).

The per-backend checks inside compiled fit() are in test_keras_backends.py and the SIGKILL
resume in test_keras_resume.py, each in subprocesses.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    keras = pytest.importorskip("keras")

from globalstep import Clock, ConfigError, StepError
from globalstep.checkpoint import CheckpointManager
from globalstep.compat import keras as ck
from globalstep.integrations import keras as gk
from globalstep.schedules import ExponentialDecay
from globalstep.summary import SummaryWriter, read_run


def _model(seed: int = 0, dropout: float = 0.2):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential(
        [
            keras.Input((3,)),
            keras.layers.Dense(4, activation="relu"),
            keras.layers.Dropout(dropout),
            keras.layers.Dense(1),
        ]
    )
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
    return model


def _data(rows: int = 20):
    rng = np.random.default_rng(0)
    return rng.normal(size=(rows, 3)).astype("float32"), rng.normal(size=(rows, 1)).astype(
        "float32"
    )


def _values(model):
    return [gk._numpy(v) for v in model.variables]


class _StepBound(keras.callbacks.Callback):
    """Raises once fit() runs more than ``n`` batches (an endless fit fails, not hangs)."""

    def __init__(self, n: int = 50) -> None:
        super().__init__()
        self.n, self.seen = n, 0

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1
        if self.seen > self.n:
            raise RuntimeError(f"fit() ran past {self.n} batches")


def test_core_schedule_becomes_a_keras_schedule():
    """A core schedule wraps into a LearningRateSchedule giving its values at the step."""
    lr = gk.learning_rate_schedule(ExponentialDecay(0.1, 10, 0.5))
    assert isinstance(lr, keras.optimizers.schedules.LearningRateSchedule)
    assert float(keras.ops.convert_to_numpy(lr(keras.ops.convert_to_tensor(20)))) == 0.025


def test_accumulation_reads_the_schedule_at_the_update():
    """With accumulation 4, micro-steps 4..7 read the schedule at global step 1."""
    lr = gk.learning_rate_schedule(ExponentialDecay(1.0, 1, 0.5), gradient_accumulation_steps=4)
    assert [float(lr(np.int64(s))) for s in (3, 4, 7, 8)] == [1.0, 0.5, 0.5, 0.25]


def test_at_iterations_reads_the_schedule_at_the_global_step():
    """at_iterations() takes optimizer micro-steps: iterations // accumulation, its dtype."""
    lr = gk.GlobalStepSchedule(ExponentialDecay(1.0, 1, 0.5), gradient_accumulation_steps=4)
    values = lr.at_iterations(np.array([3, 4, 7, 8]))
    assert values.dtype == lr.dtype
    assert values.tolist() == [1.0, 0.5, 0.5, 0.25]
    assert float(lr.at_iterations(8)) == float(lr.at(2)) == 0.25


def test_keras_saving_records_the_public_module():
    """A saved model's config names globalstep.integrations.keras, where the class lives."""
    lr = gk.learning_rate_schedule(ExponentialDecay(0.1, 10, 0.5))
    config = keras.saving.serialize_keras_object(lr)
    assert config["module"] == "globalstep.integrations.keras"
    assert config["registered_name"] == "globalstep>GlobalStepSchedule"


def test_compat_keras_schedule_is_returned_as_itself():
    """A compat.keras schedule is already a Keras schedule and comes back unchanged."""
    lr = ck.ExponentialDecay(0.1, 10, 0.5)
    assert gk.learning_rate_schedule(lr) is lr


def test_compat_schedule_built_before_keras_still_converts():
    """A compat schedule whose class is the plain one converts to its Keras face."""
    plain = object.__new__(ck.ExponentialDecay)
    plain.__init__(0.1, 10, 0.5)
    face = gk.learning_rate_schedule(plain)
    assert isinstance(face, keras.optimizers.schedules.LearningRateSchedule)
    assert face.get_config() == plain.get_config()


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: gk.learning_rate_schedule(lambda s: 0.1), "`schedule` must be a globalstep"),
        (
            lambda: gk.learning_rate_schedule(
                ExponentialDecay(0.1, 10, 0.5), gradient_accumulation_steps=0
            ),
            "`gradient_accumulation_steps` must be None or an int >= 1",
        ),
        (
            lambda: gk.learning_rate_schedule(
                ck.ExponentialDecay(0.1, 10, 0.5), gradient_accumulation_steps=2
            ),
            "`gradient_accumulation_steps` must be None for a globalstep.compat.keras",
        ),
        (
            lambda: gk.GlobalStepSchedule.from_config(
                {"schedule": {"kind": "compat", "module": "os", "class": "system", "config": {}}}
            ),
            "`schedule` must be a config written by GlobalStepSchedule",
        ),
    ],
    ids=["not a schedule", "accumulation 0", "accumulation on compat.keras", "foreign module"],
)
def test_schedule_errors(call, match):
    """A wrong schedule argument raises ConfigError saying what to pass."""
    with pytest.raises(ConfigError, match=match):
        call()


def test_core_schedule_config_round_trips():
    """get_config()/from_config() rebuild an equal core schedule."""
    lr = gk.learning_rate_schedule(ExponentialDecay(0.1, 10, 0.5))
    assert gk.GlobalStepSchedule.from_config(lr.get_config()).schedule == lr.schedule


def test_a_compat_schedule_config_names_its_public_module(monkeypatch):
    """The config records the compat module that exports the schedule's class, whatever
    module its code lives in (the bytes of today's configs unchanged)."""
    from globalstep.compat import optax as co

    lr = co.linear_schedule(1.0, 0.0, 10)
    before = gk.learning_rate_schedule(lr).get_config()
    assert before["schedule"]["module"] == "globalstep.compat.optax"
    monkeypatch.setattr(type(lr), "__module__", "globalstep.compat._optax_simple")
    config = gk.learning_rate_schedule(lr).get_config()
    assert config == before
    assert gk.GlobalStepSchedule.from_config(config).schedule(3) == lr(3)


def test_dataset_order_is_a_function_of_seed_and_epoch():
    """Two datasets of one seed give the same batches; epochs are permuted differently."""
    x, y = _data()
    a = gk.ResumableDataset(x, y, batch_size=4, seed=3)
    b = gk.ResumableDataset(x, y, batch_size=4, seed=3)
    assert all(np.array_equal(a.batch(i)[0], b.batch(i)[0]) for i in range(10))
    assert not np.array_equal(a.order(0), a.order(1))
    assert sorted(a.order(1)) == list(range(20))


def test_dataset_serves_the_positions_epoch_under_plain_fit():
    """Restored at position 10 (epoch 2 of 5 batches), Keras' next epoch is the data's
    epoch 2, its batches in the data's order whatever index Keras asks for; the one batch
    Keras' model building reads, inside an epoch of its own, moves nothing on."""
    x, y = _data()
    data = gk.ResumableDataset(x, y, batch_size=4)
    state = data.state_dict()
    data.load_state_dict({**state, "position": 10})
    assert data.num_batches == len(data) == 5
    data.on_epoch_begin()  # model building (JAX and torch backends)
    data[0]
    data.on_epoch_end()
    data.on_epoch_end()  # Keras' reset() ends an epoch again
    data.on_epoch_begin()
    assert np.array_equal(data[3][0], data.batch(10)[0])  # Keras' shuffle gave index 3
    assert np.array_equal(data[0][0], data.batch(11)[0])
    for index in (1, 2, 4):
        data[index]
    data.on_epoch_end()
    data.on_epoch_begin()
    assert np.array_equal(data[0][0], data.batch(15)[0])


def test_dataset_copies_and_pickles_with_its_position():
    """A copy (as worker processes get one) keeps the position and serves the same
    batches."""
    import copy
    import pickle

    x, y = _data()
    data = gk.ResumableDataset(x, y, batch_size=4, seed=5)
    data.load_state_dict({**data.state_dict(), "position": 5})
    for other in (copy.deepcopy(data), pickle.loads(pickle.dumps(data))):
        assert other.position == 5
        other.on_epoch_begin()
        data.on_epoch_begin()
        assert np.array_equal(other[0][0], data[0][0])
        with other.streaming():
            assert other.num_batches is None
            assert np.array_equal(other[2][0], data.batch(7)[0])


def test_plain_fit_refuses_to_restart_a_restored_epoch():
    """Plain model.fit on data restored mid-epoch raises ConfigError naming gk.fit."""
    x, y = _data()
    data = gk.ResumableDataset(x, y, batch_size=5)
    model = _model()
    data.load_state_dict({**data.state_dict(), "position": 6})  # as a checkpoint at step 6
    model.optimizer.iterations.assign(6)
    clock = Clock(steps_per_epoch=4)
    clock.tick(6)
    callback = gk.GlobalStepCallback(clock, data=data)
    match = r"`data` is at batch 2 of epoch 1 .*globalstep\.integrations\.keras\.fit"
    with pytest.raises(ConfigError, match=match):
        model.fit(data, epochs=2, verbose=0, callbacks=[callback, _StepBound()])


@pytest.mark.parametrize(("workers", "processes"), [(2, False), (1, True)])
def test_plain_fit_refuses_workers_on_resumable_data(workers, processes, monkeypatch):
    """With Keras' workers (threads or processes) plain model.fit raises ConfigError
    naming workers and gk.fit, before Keras starts a worker process."""
    forks = []
    monkeypatch.setattr(os, "fork", lambda: forks.append(1) or -1)
    x, y = _data()
    data = gk.ResumableDataset(x, y, batch_size=5)
    data.workers, data.use_multiprocessing = workers, processes
    match = r"`workers` must be 1 without use_multiprocessing .*keras\.fit\(model, data"
    with pytest.raises(ConfigError, match=match):
        _model().fit(data, epochs=1, verbose=0, callbacks=[_StepBound()])
    assert forks == []  # a pool left running past the error would fork in later tests


def test_plain_fit_refuses_steps_per_epoch_on_resumable_data():
    """model.fit(data, steps_per_epoch=2) with the callback raises ConfigError: the
    data's epochs are its own 4 batches."""
    x, y = _data()
    data = gk.ResumableDataset(x, y, batch_size=5)
    callback = gk.GlobalStepCallback(Clock(), data=data)
    match = "`steps_per_epoch` must be left out of model.fit.. on a ResumableDataset"
    with pytest.raises(ConfigError, match=match):
        _model().fit(data, epochs=1, steps_per_epoch=2, verbose=0, callbacks=[callback])


def test_dataset_refuses_another_order_on_restore():
    """Loading a state saved with another seed raises ConfigError naming the seed."""
    x, y = _data()
    state = gk.ResumableDataset(x, y, batch_size=4, seed=1).state_dict()
    with pytest.raises(ConfigError, match="`seed` must equal the checkpoint's"):
        gk.ResumableDataset(x, y, batch_size=4, seed=2).load_state_dict(state)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_size": 0}, "`batch_size` must be an int >= 1"),
        ({"batch_size": 4, "seed": -1}, "`seed` must be an int >= 0"),
        ({"batch_size": 40}, "`batch_size` must be <= the 20 rows"),
    ],
)
def test_dataset_errors(kwargs, match):
    """Bad dataset arguments raise ConfigError naming them."""
    x, y = _data()
    with pytest.raises(ConfigError, match=match):
        gk.ResumableDataset(x, y, drop_remainder=True, **kwargs)


def test_dataset_refuses_arrays_of_different_lengths():
    """x and y of different lengths raise ConfigError."""
    x, y = _data()
    with pytest.raises(ConfigError, match="`x` must hold arrays of one length"):
        gk.ResumableDataset(x, y[:5], batch_size=2)


def test_model_round_trips_through_a_checkpoint(tmp_path):
    """A trained model's variables and optimizer state restore into a fresh model."""
    x, y = _data()
    model = _model(seed=1)
    model.fit(x, y, batch_size=5, epochs=1, verbose=0)
    with CheckpointManager(tmp_path) as manager:
        manager.save(4, {"model": model})
        fresh = _model(seed=2)
        before = zip(_values(model), _values(fresh), strict=True)
        assert not all(np.array_equal(a, b) for a, b in before)
        manager.restore({"model": fresh})
    assert all(np.array_equal(a, b) for a, b in zip(_values(model), _values(fresh), strict=True))
    assert int(fresh.optimizer.iterations) == 4
    assert any("seed_generator" in v.path for v in fresh.variables)


def test_unbuilt_optimizer_alone_takes_its_slots_when_it_builds(tmp_path):
    """An optimizer restored before its first update keeps its slots' values and assigns
    them when it creates the slots (TensorFlow's deferred restoration), bit for bit."""
    x, y = _data()
    model = _model(seed=1)
    model.fit(x, y, batch_size=5, epochs=1, verbose=0)
    with CheckpointManager(tmp_path) as manager:
        manager.save(4, {"optimizer": model.optimizer})
        fresh = keras.optimizers.Adam(0.01)
        _, report = manager.restore({"optimizer": fresh}, partial=True)
    assert report.ok
    assert not fresh.built
    assert int(fresh.iterations) == 4  # what exists is assigned at once
    assert (
        report.deferred
        == report.pending()
        == [f"optimizer/{i:04d}" for i in range(2, len(model.optimizer.variables))]
    )
    fresh.build(model.trainable_variables)
    assert report.pending() == []
    saved = [gk._numpy(v) for v in model.optimizer.variables]
    assert all(np.array_equal(a, gk._numpy(b)) for a, b in zip(saved, fresh.variables, strict=True))


def test_variable_round_trips(tmp_path):
    """A keras.Variable saves as its array and restores in place."""
    v = keras.Variable(np.arange(3, dtype="float32"))
    with CheckpointManager(tmp_path) as manager:
        manager.save(0, {"v": v})
        v.assign(np.zeros(3, dtype="float32"))
        manager.restore({"v": v})
    assert gk._numpy(v).tolist() == [0.0, 1.0, 2.0]


def test_model_state_takes_a_model_of_any_class():
    """model_state() wraps any keras.Model and refuses anything else."""
    assert "variables" in gk.model_state(_model()).state_dict()
    with pytest.raises(ConfigError, match=r"`model` must be a keras\.Model"):
        gk.model_state(object())


def test_callback_refuses_a_clock_out_of_step():
    """A clock ahead of optimizer.iterations raises StepError naming both counts."""
    x, y = _data()
    clock = Clock()
    clock.tick(5)
    with pytest.raises(StepError, match=r"is at step 5 but optimizer\.iterations is 0"):
        _model().fit(x, y, batch_size=5, verbose=0, callbacks=[gk.GlobalStepCallback(clock)])


def test_callback_warns_that_plain_data_restarts_the_epoch():
    """Resuming mid-epoch on arrays warns that fit() restarts the epoch."""
    x, y = _data()
    model = _model()
    model.fit(x, y, batch_size=5, epochs=1, verbose=0, steps_per_epoch=2)
    clock = Clock(steps_per_epoch=4)
    clock.tick(2)
    with pytest.warns(UserWarning, match="restarts this epoch from its first batch"):
        model.fit(x, y, batch_size=5, verbose=0, callbacks=[gk.GlobalStepCallback(clock)])


def test_callback_logs_each_batch_loss_and_rate(tmp_path):
    """The logged loss is each batch's own (not the running mean), with the rate used."""
    x, y = _data()
    model = _model(dropout=0.0)
    model.optimizer = keras.optimizers.SGD(learning_rate=ck.ExponentialDecay(0.0, 2, 0.5))
    model.compile(optimizer=model.optimizer, loss="mse")
    before = [float(model.evaluate(x[i : i + 5], y[i : i + 5], verbose=0)) for i in (0, 5, 10, 15)]
    clock = Clock()
    with SummaryWriter(tmp_path, clock=clock, formats=("jsonl",)) as writer:
        callback = gk.GlobalStepCallback(clock, writer=writer)
        model.fit(x, y, batch_size=5, shuffle=False, verbose=0, callbacks=[callback])
    run = read_run(tmp_path)
    losses = [p.value for p in run.scalars["loss"]]
    assert [p.step for p in run.scalars["loss"]] == [1, 2, 3, 4]  # the step after each update
    assert np.allclose(losses, before, rtol=1e-6, atol=0)
    assert losses[1] != np.mean(losses[:2])
    assert [p.value for p in run.scalars["lr"]] == [0.0, 0.0, 0.0, 0.0]


def test_callback_rate_tag_keeps_the_old_name(tmp_path):
    """rate_tag="learning_rate" writes the rate under the name the callback used before."""
    x, y = _data()
    clock = Clock()
    with SummaryWriter(tmp_path, clock=clock, formats=("jsonl",)) as writer:
        callback = gk.GlobalStepCallback(clock, writer=writer, rate_tag="learning_rate")
        _model().fit(x, y, batch_size=5, verbose=0, callbacks=[callback])
    run = read_run(tmp_path)
    assert sorted(run.scalars) == ["learning_rate", "loss"]
    assert [p.step for p in run.scalars["learning_rate"]] == [1, 2, 3, 4]


@pytest.mark.parametrize("tag", ["", "  ", "loss", 3])
def test_callback_refuses_a_bad_rate_tag(tag):
    """A blank rate_tag, or the loss's own, raises ConfigError naming it."""
    with pytest.raises(ConfigError, match="`rate_tag` must be a non-empty tag other than"):
        gk.GlobalStepCallback(rate_tag=tag)


def test_callback_saves_on_its_trigger_and_restores(tmp_path):
    """Saved every 2 updates, the newest checkpoint restores model, clock and data."""
    x, y = _data()
    data = gk.ResumableDataset(x, y, batch_size=5)
    model = _model()
    with CheckpointManager(tmp_path) as manager:
        callback = gk.GlobalStepCallback(Clock(), manager=manager, save_every=2, data=data)
        gk.fit(model, data, epochs=1, callbacks=[callback], verbose=0)
        assert manager.steps() == [2, 4]
        other = gk.GlobalStepCallback(
            Clock(), manager=manager, data=gk.ResumableDataset(x, y, batch_size=5)
        )
        fresh = _model(seed=5)
        assert other.restore(fresh)
    assert other.clock.step == 4
    assert other.data.position == 4
    assert all(np.array_equal(a, b) for a, b in zip(_values(model), _values(fresh), strict=True))


def test_fit_refuses_what_it_sets_itself():
    """fit() raises ConfigError for steps_per_epoch, which it takes from the data."""
    x, y = _data()
    with pytest.raises(ConfigError, match="`steps_per_epoch` is set by fit"):
        gk.fit(_model(), gk.ResumableDataset(x, y, batch_size=5), epochs=1, steps_per_epoch=3)
