"""ResumableTFDataset: a shuffled tf.data pipeline resumed at the batch it reached."""

from __future__ import annotations

import numpy as np
import pytest

from globalstep import Clock, ConfigError

tf = pytest.importorskip("tensorflow")
from globalstep.checkpoint import CheckpointManager  # noqa: E402
from globalstep.integrations import tensorflow as gtf  # noqa: E402

ROWS, BATCH, EPOCHS = 50, 8, 3  # 7 batches an epoch, the last one of 2 rows


def _data(**kwargs):
    x = np.random.default_rng(0).normal(size=(ROWS, 3)).astype("float32")
    y = np.arange(ROWS, dtype="int64")
    return gtf.ResumableTFDataset(x, {"y": y}, batch_size=BATCH, seed=11, **kwargs)


def _bytes(batch):
    return [t.numpy().tobytes() for t in tf.nest.flatten(batch)]


def _all_batches(data):
    out = []
    for _ in range(data.epoch, EPOCHS):
        out += [_bytes(b) for b in data]
    return out


def test_each_epoch_is_a_permutation_of_the_rows_in_its_own_order():
    """Every row once per epoch; epochs differ; the same seed gives the same order."""
    data = _data()
    orders = [data.order(e) for e in range(EPOCHS)]
    for order in orders:
        assert sorted(order) == list(range(ROWS))
    assert not np.array_equal(orders[0], orders[1])
    assert np.array_equal(_data().order(2), orders[2])
    assert not np.array_equal(
        gtf.ResumableTFDataset(np.zeros(ROWS), batch_size=5, seed=12).order(0), orders[0]
    )
    ys = [b[1]["y"].numpy() for b in data.dataset(EPOCHS)]
    assert len(ys) == EPOCHS * data.steps_per_epoch == 21
    assert np.array_equal(np.concatenate(ys), np.concatenate(orders))


def test_iterating_yields_the_rest_of_the_epoch_and_counts_the_position():
    """for batch in data: the current epoch's remaining batches, position advanced each."""
    data = _data()
    first = [b for b in data]
    assert len(first) == 7
    assert data.position == 7
    assert data.epoch == 1
    assert int(first[-1][1]["y"].shape[0]) == 2


@pytest.mark.parametrize("stop", [1, 5, 7, 9, 20])
def test_a_restored_pipeline_continues_with_the_same_batches(tmp_path, stop):
    """Saved after `stop` batches and restored into a fresh object (a new process's),
    the remaining batches are byte-identical to the uninterrupted run's."""
    full = _all_batches(_data())
    data = _data()
    it = iter(data)
    got = []
    for _ in range(stop):
        try:
            batch = next(it)
        except StopIteration:
            it = iter(data)
            batch = next(it)
        got.append(_bytes(batch))
    it.close()
    clock = Clock()
    clock.tick(stop)
    with CheckpointManager(tmp_path / "ckpt") as manager:
        manager.save(clock, {"data": data})
    fresh = _data()
    with CheckpointManager(tmp_path / "ckpt") as manager:
        manager.restore({"data": fresh})
    assert fresh.position == stop
    assert got + _all_batches(fresh) == full


def test_endless_dataset_and_transform():
    """dataset(None) runs past the epochs; transform is applied to the batches."""
    data = _data(transform=lambda d: d.map(lambda x, y: (x * 2.0, y)).prefetch(2))
    plain = _data()
    a = list(data.dataset().take(30))
    b = list(plain.dataset().take(30))
    assert len(a) == 30
    assert all(np.array_equal(p[0].numpy(), 2.0 * q[0].numpy()) for p, q in zip(a, b, strict=True))


def test_no_shuffle_and_drop_remainder():
    """shuffle=False keeps the rows' order; drop_remainder drops the short batch."""
    data = _data(shuffle=False, drop_remainder=True)
    assert np.array_equal(data.order(3), np.arange(ROWS))
    assert data.steps_per_epoch == len(data) == 6
    assert [int(b[1]["y"].shape[0]) for b in data] == [8] * 6


def test_a_checkpoint_of_another_order_is_refused():
    """Other settings, or a TensorFlow that shuffles otherwise, are refused at restore."""
    state = _data().state_dict()
    with pytest.raises(ConfigError, match="`seed` must equal the checkpoint's"):
        gtf.ResumableTFDataset(np.zeros((ROWS, 3)), batch_size=BATCH, seed=1).load_state_dict(state)
    with pytest.raises(ConfigError, match="`batch_size` must equal the checkpoint's"):
        gtf.ResumableTFDataset(np.zeros((ROWS, 3)), batch_size=4, seed=11).load_state_dict(state)
    with pytest.raises(ConfigError, match=r"`state\['order_crc32'\]` must match the order"):
        _data().load_state_dict({**state, "order_crc32": state["order_crc32"] ^ 1})
    with pytest.raises(ConfigError, match=r"`state\['position'\]` must be an int >= 0"):
        _data().load_state_dict({**state, "position": -1})


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_size": 0}, "`batch_size` must be an int >= 1"),
        ({"batch_size": 51, "drop_remainder": True}, "`batch_size` must be <= the 50 rows"),
        ({"batch_size": 4, "seed": -1}, "`seed` must be an int >= 0"),
        ({"batch_size": 4, "shuffle": 1}, "`shuffle` must be a bool"),
        ({"batch_size": 4, "drop_remainder": None}, "`drop_remainder` must be a bool"),
        ({"batch_size": 4, "transform": 3}, "`transform` must be a callable"),
    ],
)
def test_bad_arguments(kwargs, match):
    """Each argument's rule is enforced at construction."""
    with pytest.raises(ConfigError, match=match):
        gtf.ResumableTFDataset(np.zeros((ROWS, 2)), **kwargs)


def test_bad_data_and_epochs():
    """Arrays of different lengths, scalars, a bad epoch count are refused."""
    with pytest.raises(ConfigError, match="`x` must hold arrays of one length"):
        gtf.ResumableTFDataset(np.zeros(5), np.zeros(6), batch_size=2)
    with pytest.raises(ConfigError, match="`x` must hold arrays of one length"):
        gtf.ResumableTFDataset(np.zeros(5), np.float32(1.0), batch_size=2)
    with pytest.raises(ConfigError, match="`epochs` must be an int >= 1"):
        _data().dataset(0)
    with pytest.raises(ConfigError, match="`epoch` must be an int >= 0"):
        _data().order(-1)
