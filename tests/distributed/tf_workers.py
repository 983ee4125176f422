"""Workers of the TensorFlow multi-worker tests: one task of a MultiWorkerMirroredStrategy
on 127.0.0.1, forked by tf_spawn's zygote as ``main(SCENARIO, RANK, PORTS, OUT)``; each
writes what it saw to ``OUT/<scenario>-<rank>.json``:

- ``group``: the TFGroup contract (rank, world size, collectives bit for bit, the store's
  six calls), and the time a peer's death takes to be noticed (rank 1 dies at the end).
- ``single``: a one-process TensorFlow user (no TF_CONFIG).
- ``plain@N``: a CheckpointManager(distributed=True) loop with ``follow`` up to update N.
- ``train[@k:how]``: a Run of a Keras model in the strategy's scope, killed or signalled
  at update k (see :func:`train_scenario`).
- ``rollback@nan`` / ``rollback@reference``: a Keras model under a Run with
  ``Rollback(skip_batches=2)``, worker 1's batch at data position 23 holding a NaN; the
  reference has no NaN and no policy, its data position moved from 20 to 26 by hand.
- ``data@PHASE:BATCHES``: a ``ResumableOrder`` of 37 rows in a CheckpointManager
  (distributed on several workers), restored where a checkpoint exists, BATCHES batches
  of 3 row indices drawn (``rest``: to the epoch's end), gathered from the worker's rows
  with ``tf.gather``, and saved at the next step.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any


def strategy(rank: int, ports: list[str]) -> Any:
    """This worker's MultiWorkerMirroredStrategy, from a TF_CONFIG of every port."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    os.environ["TF_CONFIG"] = json.dumps(
        {"cluster": cluster, "task": {"type": "worker", "index": rank}}
    )
    import tensorflow as tf

    return tf.distribute.MultiWorkerMirroredStrategy()


def group_scenario(rank: int, out: Path) -> dict[str, Any]:
    """The group's contract on two workers, then rank 1 dies and rank 0 times the notice."""
    from globalstep import PeerLostError, _group
    from globalstep._group._tensorflow import TFGroup
    from globalstep.distributed import SharedStepCounter
    from globalstep.distributed import store as distributed_store

    group = _group.active()
    result: dict[str, Any] = {
        "type": type(group).__name__,
        "same": group is _group.active("tensorflow"),
        "rank": group.rank,
        "world_size": group.world_size,
        "writer": group.is_writer(),
    }
    assert isinstance(group, TFGroup)
    floats = [0.1 * (rank + 1), -0.0, float("inf"), 1e-310, 2.0**-1074 * (rank + 1)]
    result["floats"] = [[v.hex() for v in row] for row in group.all_gather_floats(floats)]
    result["ints"] = group.all_gather_ints([rank, -(2**63) + rank, 2**63 - 1 - rank])
    result["sum"] = group.all_reduce_floats([0.1 * (rank + 1), float(rank)], "sum")
    result["max"] = group.all_reduce_floats([float(rank), -float(rank)], "max")
    result["min"] = group.all_reduce_floats([float(rank), -float(rank)], "min")
    result["broadcast"] = group.broadcast_int(100 + rank, src=1)
    group.barrier()
    store = group.store()
    won = store.compare_set("test/first", "", f"rank{rank}")
    group.barrier()
    result["first"] = won.decode()
    result["first_after"] = store.get("test/first").decode()
    if rank == 0:
        store.set("test/k", "a")
        store.set("test/k", "b")
    group.barrier()
    result["get"] = store.get("test/k").decode()
    seen = store.check(["test/k"])
    while not store.check(["test/k"]):
        time.sleep(0.001)
    result["check_missing"] = store.check(["test/none"])
    result["check_present"] = store.check(["test/k"])
    result["check_first"] = seen
    adds = [store.add("test/n", 1) for _ in range(200)]
    group.barrier()
    result["adds"] = adds
    result["add_total"] = store.add("test/n", 0)
    result["public_store"] = distributed_store() is store
    counter = SharedStepCounter(distributed_store(), "test/steps", start=10)
    result["counter"] = [counter.next() for _ in range(50)]
    group.barrier()
    result["counter_value"] = counter.value
    group.barrier()
    if rank == 0:
        counter.load_state_dict({"next": 1000})  # a restore, before anyone takes more
    group.barrier()
    result["counter_restored"] = [counter.next() for _ in range(3)]
    result["cas"] = store.compare_set("test/k", "b", f"c{rank}").decode()
    group.barrier()
    result["cas_after"] = store.get("test/k").decode()
    group.barrier()
    result["delete"] = store.delete_key("test/k") if rank == 0 else None
    group.barrier()
    result["deleted"] = store.check(["test/k"]) or store.try_get("test/k", 50) is not None
    result["lost_alive"] = group.lost([0, 1])
    store.check(["test/never"])
    began = time.perf_counter()
    for _ in range(1000):
        store.check(["test/never"])  # Preemption's per-update look, when no stop came
    result["check_seconds"] = (time.perf_counter() - began) / 1000
    began = time.perf_counter()
    for _ in range(50):
        group.all_gather_ints([rank])
    result["gather_seconds"] = (time.perf_counter() - began) / 50
    result["scope"] = group.scope("test/scope")
    group.barrier()
    if rank == 1:
        (out / f"group-{rank}.json").write_text(json.dumps(result))
        os.kill(os.getpid(), signal.SIGKILL)
    died = time.monotonic()
    try:
        group.all_gather_ints([1])
    except PeerLostError as err:
        result["noticed_seconds"] = time.monotonic() - died
        result["noticed"] = str(err)
        result["noticed_ranks"] = err.ranks
    result["lost_dead"] = group.lost([0, 1])
    return result


def single_scenario() -> dict[str, Any]:
    """A one-process TensorFlow user (a strategy without TF_CONFIG included)."""
    import tensorflow as tf

    from globalstep import _group

    os.environ.pop("TF_CONFIG", None)
    seen = {"plain": type(_group.active()).__name__}
    with tf.distribute.MirroredStrategy().scope():
        tf.Variable(1.0)
    seen["mirrored"] = type(_group.active()).__name__
    tf.distribute.MultiWorkerMirroredStrategy()
    seen["multiworker_alone"] = type(_group.active()).__name__
    seen["initialised"] = _group.initialised()
    return seen


TOTAL, SAVE_EVERY, BATCH = 16, 4, 8


def _keras_model(tf_strategy: Any) -> tuple[Any, Any, Any]:
    """A small Keras model and Adam built in the strategy's scope (the same initial weights
    on every worker), and the ``tf.function`` step that trains them through
    ``strategy.run`` on this worker's batch (the gradients all-reduced by the strategy)."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(1234)
    with tf_strategy.scope():
        model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)]
        )
        optimizer = keras.optimizers.Adam(0.05)

    def replica(xb: Any, yb: Any) -> Any:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(xb, training=True) - yb) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    @tf.function
    def train_step(xb: Any, yb: Any) -> Any:
        return tf_strategy.run(replica, args=(xb, yb))

    return model, optimizer, train_step


def train_scenario(rank: int, out: Path, tf_strategy: Any, kill: str) -> dict[str, Any]:
    """A Keras model and Adam built in the strategy's scope, trained by ``strategy.run``
    on this worker's own batches (its own NumPy generator) under a Run that saves every
    SAVE_EVERY updates on both workers into one directory. ``kill`` (``k:how``) SIGKILLs
    this worker at its update k: ``before`` the update is reported, ``save`` at a random
    moment of the next 0.2 s after it (inside the save where k is a save step), ``alone``
    rank 1 only, before the update is reported (writing the time to ``killed.txt``),
    ``insideR`` rank R only, inside the save of update k, as it writes its per-rank leaves
    (the time in ``killed.txt`` too), ``term`` a SIGTERM to rank 1 alone at update k
    (the Run then handles the stop signals)."""
    import threading

    import numpy as np

    from globalstep import Run
    from globalstep.integrations.tensorflow import follow
    from globalstep.run import Ranks

    kill_at, _, how = (kill or "-1:before").partition(":")
    if how == f"inside{rank}":
        from globalstep.checkpoint._ranks import coordinated

        write = coordinated.write_rank_leaves

        def write_then_die(*args: Any) -> Any:
            if updates == int(kill_at):
                (out / "killed.txt").write_text(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
            return write(*args)

        coordinated.write_rank_leaves = write_then_die
    model, optimizer, train_step = _keras_model(tf_strategy)
    data = np.random.default_rng(100 + rank)

    updates = 0
    with Run(
        out / "run",
        total_steps=TOTAL,
        save_every=SAVE_EVERY,
        progress=False,
        handle_signals=how == "term",
        ranks=Ranks(stop_every=3),
        writer_options={"formats": ("jsonl",)},
    ) as run:
        run.restore({"model": model, "optimizer": optimizer, "data": data})
        step_of = follow(optimizer, run.clock)  # the clock follows optimizer.iterations
        while not run.done:
            xb = data.normal(size=(BATCH, 4)).astype("float32")
            yb = np.sin(xb.sum(axis=1, keepdims=True))
            loss = train_step(xb, yb)
            step_of()
            updates += 1
            if updates == int(kill_at) and (how == "before" or (how, rank) == ("alone", 1)):
                (out / "killed.txt").write_text(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
            if updates == int(kill_at) and how == "term" and rank == 1:
                os.kill(os.getpid(), signal.SIGTERM)  # a stop request to this worker alone
            if updates == int(kill_at) and how == "save":
                delay = float(np.random.default_rng(int(time.time() * 1e6)).uniform(0, 0.2))
                threading.Timer(delay, os.kill, (os.getpid(), signal.SIGKILL)).start()
            run.update(loss=float(loss.numpy()))
            if updates == int(kill_at) and how == "save":
                time.sleep(1)  # the timer kills it
    return {
        "step": run.step,
        "iterations": int(optimizer.iterations.numpy()),
        "weights": [np.asarray(v.numpy()).tobytes().hex() for v in model.variables],
        "optimizer": {v.path: np.asarray(v.numpy()).tobytes().hex() for v in optimizer.variables},
        "generator": json.loads(json.dumps(data.bit_generator.state)),
        "next_draw": data.normal(size=3).tolist(),
    }


def plain_scenario(rank: int, out: Path, tf_strategy: Any, until: int) -> dict[str, Any]:
    """A plain loop: CheckpointManager(distributed=True) on both workers, the clock
    following Adam's iterations (``follow``) after each ``strategy.run``, a per-rank leaf
    (``PerRank``) and a generator per worker; trains from the newest checkpoint up to
    update ``until``, saving every 3."""
    import keras
    import numpy as np
    import tensorflow as tf

    from globalstep import CheckpointManager, Clock, PerRank
    from globalstep._group import active
    from globalstep.integrations.tensorflow import follow

    keras.utils.set_random_seed(99)
    with tf_strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
        optimizer = keras.optimizers.Adam(0.1)
    clock = Clock()
    data = np.random.default_rng(7 + rank)
    mine = PerRank(np.zeros(2))
    state = {"model": model, "optimizer": optimizer, "clock": clock, "data": data, "mine": mine}
    manager = CheckpointManager(out / "ckpt", distributed=True, max_to_keep=2)
    restored = manager.latest_step()
    if restored is not None:
        manager.restore(state)
    step_of = follow(optimizer, clock)

    @tf.function
    def train_step(xb: Any) -> Any:
        def replica(xb: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(model(xb) ** 2)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        return tf_strategy.run(replica, args=(xb,))

    while clock.step < until:
        train_step(data.normal(size=(4, 3)).astype("float32"))
        step_of()
        mine.value += rank + 1
        if clock.step % 3 == 0:
            manager.save(clock, state)
    manager.close()
    # The zygote's child leaves by os._exit, skipping TensorFlow's own shutdown: without a
    # barrier one worker can leave while its peer still reads the last all-reduce's buffer
    # from it ("Socket closed"). Nothing of ours runs after the last update here.
    active("tensorflow").barrier()
    return {
        "restored": restored,
        "step": clock.step,
        "iterations": int(optimizer.iterations.numpy()),
        "weights": [np.asarray(v.numpy()).tobytes().hex() for v in model.variables],
        "optimizer": {v.path: np.asarray(v.numpy()).tobytes().hex() for v in optimizer.variables},
        "generator": json.loads(json.dumps(data.bit_generator.state)),
        "mine": mine.value.tolist(),
    }


NAN_AT, SKIP = 23, 2


def rollback_scenario(rank: int, out: Path, tf_strategy: Any, kind: str) -> dict[str, Any]:
    """Worker 1's NaN at data position 23 (worker 0's loss finite there) under
    ``Rollback``: both workers must roll back to step 20 at the same update and skip the
    same batches; ``reference`` never draws them."""
    import numpy as np

    from globalstep import Run
    from globalstep.run import Ranks, Rollback

    model, optimizer, train_step = _keras_model(tf_strategy)

    drawn: list[int] = []
    rolled: list[dict[str, Any]] = []
    with Run(
        out / kind,
        total_steps=40,
        save_every=10,
        rollback=Rollback(skip_batches=SKIP) if kind == "nan" else None,
        progress=False,
        handle_signals=False,
        ranks=Ranks(reduce="mean"),
        writer_options={"formats": ("jsonl",)},
    ) as run:
        run.restore({"model": model, "optimizer": optimizer})
        while not run.done:
            if kind == "reference" and run.data_position == 20:
                run.data_position = NAN_AT + 1 + SKIP
            position = run.next_batch()
            xb = np.random.default_rng(1000 * rank + position).normal(size=(8, 4))
            if rank == 1 and position == NAN_AT:
                xb[0, 0] = np.nan
            xb = xb.astype("float32")
            loss = float(train_step(xb, np.sin(xb.sum(axis=1, keepdims=True))).numpy())
            before = run.step
            drawn.append(position)
            if not run.update(loss=loss):
                rolled.append(
                    {
                        "step": before,
                        "own_loss": repr(loss),
                        "restored": run.step,
                        "data_position": run.data_position,
                    }
                )
    return {
        "drawn": drawn,
        "rolled": rolled,
        "step": run.step,
        "weights": [np.asarray(v.numpy()).tobytes().hex() for v in model.variables],
        "optimizer": [np.asarray(v.numpy()).tobytes().hex() for v in optimizer.variables],
    }


def data_scenario(rank: int, out: Path, size: int, batches: str) -> dict[str, Any]:
    """One phase of 2 -> 1 -> 2 workers mid-epoch (see the module's text)."""
    import tensorflow as tf

    from globalstep.checkpoint import CheckpointManager
    from globalstep.integrations.tensorflow import ResumableOrder

    rows = tf.range(100, 137)  # the data: row i holds 100 + i
    order = ResumableOrder(37, seed=5)
    assert (order.rank, order.world_size) == (rank, size), order
    with CheckpointManager(out / "data", distributed=size > 1) as manager:
        step = manager.latest_step() or 0
        if step:
            manager.restore({"order": order})
        drawn: list[int] = []
        for index, batch in enumerate(order.batches_of(3)):
            drawn += [int(v) - 100 for v in tf.gather(rows, batch).numpy()]
            if batches != "rest" and index + 1 == int(batches):
                break
        manager.save(step + 1, {"order": order})
    return {"drawn": drawn, "epoch": order.epoch}


def main(scenario: str, rank: int, ports: list[str], out_text: str) -> None:
    """Runs one scenario on this worker and writes its result."""
    out = Path(out_text)
    if scenario == "single":
        result = single_scenario()
        (out / f"{scenario}-{rank}.json").write_text(json.dumps(result))
        return
    tf_strategy = strategy(rank, ports)
    if scenario == "group":
        result = group_scenario(rank, out)
    elif scenario.startswith("plain"):
        result = plain_scenario(rank, out, tf_strategy, int(scenario.partition("@")[2]))
    elif scenario.startswith("train"):
        result = train_scenario(rank, out, tf_strategy, scenario.partition("@")[2])
    elif scenario.startswith("rollback"):
        result = rollback_scenario(rank, out, tf_strategy, scenario.partition("@")[2])
    elif scenario.startswith("data"):
        batches = scenario.partition(":")[2]
        result = data_scenario(rank, out, len(ports), batches)
    else:
        raise ValueError(scenario)
    (out / f"{scenario}-{rank}.json").write_text(json.dumps(result))
