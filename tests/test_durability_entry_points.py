"""Every public way to commit a checkpoint goes through the one durability path (issue 33,
point 5): the points an open summary writer accepted before the save are on disk when the
save returns (an async save: when its commit is waited for), read back by a fresh reader,
without the test flushing or closing the writer.

The path is :meth:`globalstep.checkpoint._files.commit.CommitProtocol.commit`, where every
checkpoint passes; the last test checks that nothing else in ``src/`` writes a commit.
"""

import ast
import contextlib
import io
from pathlib import Path

import numpy as np
import pytest

import globalstep
from globalstep.checkpoint import CheckpointManager
from globalstep.summary import SummaryWriter, read_run

SRC = Path(globalstep.__file__).parent


def _on_disk(logdir):
    """The steps of tag ``x`` in the writer's JSONL file as it is on disk now."""
    return [p.step for p in read_run(logdir).scalars.get("x", [])]


def _manager_save(directory, clock, weights):
    with CheckpointManager(directory) as manager:
        manager.save(clock, {"clock": clock, "w": weights})
        yield


def _manager_maybe_save(directory, clock, weights):
    with CheckpointManager(directory, save_every=3) as manager:
        assert manager.maybe_save(clock, {"clock": clock, "w": weights})
        yield


def _manager_async_save(directory, clock, weights):
    with CheckpointManager(directory, async_save=True) as manager:
        manager.save(clock, {"clock": clock, "w": weights})
        manager.wait()
        yield


def _manager_distributed_save(directory, clock, weights):
    dist = pytest.importorskip("torch.distributed")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with CheckpointManager(directory, distributed=True) as manager:
            manager.save(clock, {"clock": clock, "w": weights})
            yield
    finally:
        dist.destroy_process_group()


def _format_commit(directory, clock, weights):
    from globalstep.checkpoint import commit_checkpoint as commit
    from globalstep.storage import open_storage

    commit(open_storage(str(directory)), "step-000000000003", {"w": weights}, {"tree": None})
    yield


def _compat_tf_checkpoint_save(directory, clock, weights):
    from globalstep.compat import tf as tf_compat

    tf_compat.Checkpoint(step=clock, weights=weights).save(f"{directory}/ckpt")
    yield


def _compat_tf_checkpoint_write(directory, clock, weights):
    from globalstep.compat import tf as tf_compat

    tf_compat.Checkpoint(step=clock, weights=weights).write(f"{directory}/ckpt")
    yield


def _compat_tf_manager_save(directory, clock, weights):
    from globalstep.compat import tf as tf_compat

    checkpoint = tf_compat.Checkpoint(step=clock, weights=weights)
    assert tf_compat.CheckpointManager(checkpoint, str(directory), max_to_keep=2).save()
    yield


def _run_save(directory, clock, weights):
    # A Run beside a writer of the user's own (its clock is not the run's).
    with globalstep.Run(directory, total_steps=10, progress=False, stream=io.StringIO()) as run:
        run.restore({"w": weights})
        run.save()
        yield


def _keras_callback_save(directory, clock, weights):
    pytest.importorskip("keras")
    import keras

    from globalstep.integrations.keras import GlobalStepCallback

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    with CheckpointManager(directory, save_every=1) as manager:
        callback = GlobalStepCallback(manager=manager, save_every=1)
        x, y = np.ones((4, 2), "float32"), np.ones((4, 1), "float32")
        model.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[callback])
        assert manager.steps()
        yield


ENTRY_POINTS = {
    "CheckpointManager.save": _manager_save,
    "CheckpointManager.maybe_save": _manager_maybe_save,
    "CheckpointManager.save async": _manager_async_save,
    "CheckpointManager.save distributed": _manager_distributed_save,
    "checkpoint.format.commit": _format_commit,
    "compat.tf.Checkpoint.save": _compat_tf_checkpoint_save,
    "compat.tf.Checkpoint.write": _compat_tf_checkpoint_write,
    "compat.tf.CheckpointManager.save": _compat_tf_manager_save,
    "Run.save": _run_save,
    "keras GlobalStepCallback": _keras_callback_save,
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_every_save_entry_point_makes_the_writers_points_durable(tmp_path, entry):
    """Points a writer accepted before the save (queued, its thread told not to flush)
    are on disk once the save returns, by every public way to commit a checkpoint."""
    clock = globalstep.Clock()
    logdir = tmp_path / "logs"
    writer = SummaryWriter(logdir, clock=clock, formats=("jsonl",), flush_seconds=3600)
    try:
        for _ in range(3):
            clock.tick()
            writer.scalars({"x": float(clock.step)})
        assert _on_disk(logdir) == []  # queued only
        with contextlib.ExitStack() as stack:
            saving = ENTRY_POINTS[entry](tmp_path / "ckpt", clock, np.arange(3.0))
            stack.callback(saving.close)
            next(saving)  # the save has returned (and been waited for)
            assert _on_disk(logdir) == [1, 2, 3], entry
    finally:
        writer.close()


def _document_writes(path):
    """The calls in one module that write a checkpoint's state.json or its marker."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            if name == "write_document":
                found.append(f"{path.relative_to(SRC)}:{node.lineno}")
    return found


def test_only_the_commit_protocol_writes_a_checkpoint_document():
    """Nothing in src/ but the commit protocol writes a checkpoint's state.json or its
    COMMITTED marker: every checkpoint becomes visible through CommitProtocol.commit,
    where the writers' points are made durable first."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        found += _document_writes(path)
    assert found, "the commit protocol's own writes should be found"
    assert {f.partition(":")[0] for f in found} == {"checkpoint/_files/commit.py"}, found
