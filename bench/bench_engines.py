"""globalstep on JAX's and TensorFlow's own multi-process engines, beside each engine's own
checkpointing, on 2 processes on 127.0.0.1 (CPU).

``jax``: ``jax.distributed.initialize`` (gloo). A global mesh of the 2 processes' CPU
devices; an MLP (64x256x256x1, optax Adam) whose parameters are replicated over the mesh and
whose batch (32 rows per process, from each process's own NumPy generator) is sharded
along it: one jitted step, XLA's all-reduce of the gradients between the processes.
``tf``: ``tf.distribute.MultiWorkerMirroredStrategy`` (TF_CONFIG, 2 workers): the same
MLP as a Keras model with Adam, built in ``strategy.scope()``, one ``tf.function`` step
through ``strategy.run`` on each worker's own batch.

The loop contenders, round-robin for ``--rounds`` rounds of ``--n`` updates each (the order
reversed every other round), timed on process 0 from a barrier (both processes run the
same contender):

- ``plain``: the step, and the loss read back (``float(loss)``), as a user logging it does.
- ``run``: the same loop with a ``Run`` on both processes (its default ``Ranks()``: the
  stop agreement looks at the coordination service's keys every 10 updates; the step
  check, a small collective, every 100): ``run.update(loss=...)``, process 0 logs JSONL.

The save contenders, ``--saves`` each per round, alternated, timed on process 0 from a
barrier to the return of a synchronous save (committed): the parameters, the optimizer
state and the step, plus each process's own data generator for ours:

- ``globalstep``: ``CheckpointManager(dir, distributed=True).save(step, tree)``: process 0
  writes the replicated state, every process its own generator (``PerRank``).
- ``orbax`` (jax): ``orbax.checkpoint.CheckpointManager`` with asynchronous saving off,
  ``StandardSave`` of the same tree without the generator (Orbax has no per-process leaf).
- ``tf.train`` (tf): ``tf.train.CheckpointManager`` on a ``tf.train.Checkpoint`` of the
  model and optimizer; the chief writes the directory, the other worker a temporary one
  of its own (as TF needs: both in one directory crash the chief).

Printed: the median time per update (µs) or per save (ms) over the rounds, the spread, and
the median per-round ratio to ``plain`` (loops) or to the engine's own saver (saves).

Run: ``PYTHONPATH=src .venv/bin/python bench/bench_engines.py jax|tf [--n 300] [--rounds 5]
[--saves 10]`` (needs the ``bench`` extra for Orbax).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

LOOPS = ("plain", "run")
SAVES = {"jax": ("globalstep", "orbax"), "tf": ("globalstep", "tf.train")}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# ------------------------------------------------------------------------------- JAX


def _jax_worker(args: argparse.Namespace, rank: int, out: Path) -> dict[str, Any]:
    import jax

    jax.distributed.initialize(f"127.0.0.1:{args.port}", num_processes=2, process_id=rank)
    import jax.numpy as jnp
    import numpy as np
    import optax
    from jax.experimental import multihost_utils
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from globalstep import Clock, PerRank
    from globalstep.checkpoint import CheckpointManager

    mesh = Mesh(np.array(jax.devices()), ("data",))
    replicated, rows = NamedSharding(mesh, P()), NamedSharding(mesh, P("data"))
    init = np.random.default_rng(0)
    params = {
        name: jax.device_put(jnp.asarray(init.normal(size=shape) * 0.1, jnp.float32), replicated)
        for name, shape in (("w1", (64, 256)), ("w2", (256, 256)), ("w3", (256, 1)))
    }
    opt = optax.adam(1e-3)
    opt_state = jax.jit(opt.init, out_shardings=replicated)(params)
    data = np.random.default_rng(1000 + rank)

    def loss_fn(p: Any, x: Any, y: Any) -> Any:
        h = jnp.tanh(jnp.tanh(x @ p["w1"]) @ p["w2"])
        return jnp.mean((h @ p["w3"] - y) ** 2)

    @jax.jit
    def step(p: Any, s: Any, x: Any, y: Any) -> Any:
        loss, grads = jax.value_and_grad(loss_fn)(p, x, y)
        updates, s = opt.update(grads, s, p)
        return optax.apply_updates(p, updates), s, loss

    def batch() -> tuple[Any, Any]:
        x = data.normal(size=(32, 64)).astype(np.float32)
        y = np.sin(x.sum(axis=1, keepdims=True))
        return (
            multihost_utils.host_local_array_to_global_array(x, mesh, P("data")),
            multihost_utils.host_local_array_to_global_array(y, mesh, P("data")),
        )

    del rows
    state = [params, opt_state]

    def one() -> float:
        x, y = batch()
        state[0], state[1], loss = step(state[0], state[1], x, y)
        return float(loss)

    for _ in range(5):
        one()  # compiles
    work = Path(args.work)

    loop = _looper(one, work, lambda index: multihost_utils.sync_global_devices(f"loop-{index}"))

    import orbax.checkpoint as ocp

    ours = CheckpointManager(work / "ours", distributed=True, max_to_keep=2)
    theirs = ocp.CheckpointManager(
        (work / "orbax").absolute(),
        options=ocp.CheckpointManagerOptions(max_to_keep=2, enable_async_checkpointing=False),
    )
    clock = Clock()

    def save(name: str, step: int, index: int) -> float:
        multihost_utils.sync_global_devices(f"save-{index}-{name}-{step}")
        start = time.perf_counter()
        if name == "globalstep":
            tree = {"params": state[0], "opt": state[1], "clock": clock, "data": PerRank(data)}
            ours.save(step, tree)
        else:
            theirs.save(step, args=ocp.args.StandardSave({"params": state[0], "opt": state[1]}))
            theirs.wait_until_finished()
        return time.perf_counter() - start

    results = _rounds(args, loop, save, SAVES["jax"])
    ours.close()
    theirs.close()
    return results


# -------------------------------------------------------------------------- TensorFlow


def _tf_worker(args: argparse.Namespace, rank: int, out: Path) -> dict[str, Any]:
    os.environ["TF_CONFIG"] = json.dumps(
        {
            "cluster": {"worker": [f"127.0.0.1:{port}" for port in args.ports]},
            "task": {"type": "worker", "index": rank},
        }
    )
    import numpy as np
    import tensorflow as tf

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    import keras

    from globalstep import PerRank
    from globalstep.checkpoint import CheckpointManager

    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [
                keras.Input((64,)),
                keras.layers.Dense(256, activation="tanh"),
                keras.layers.Dense(256, activation="tanh"),
                keras.layers.Dense(1),
            ]
        )
        optimizer = keras.optimizers.Adam(1e-3)
        optimizer.build(model.trainable_variables)
    data = np.random.default_rng(1000 + rank)

    @tf.function
    def step(x: Any, y: Any) -> Any:
        def replica(x: Any, y: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(x, training=True) - y) ** 2)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        losses = strategy.run(replica, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)

    def one() -> float:
        x = data.normal(size=(32, 64)).astype(np.float32)
        y = np.sin(x.sum(axis=1, keepdims=True))
        return float(step(tf.constant(x), tf.constant(y)))

    for _ in range(5):
        one()
    work = Path(args.work)

    @tf.function
    def everyone() -> Any:
        ones = strategy.run(lambda: tf.constant(1.0))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, ones, axis=None)

    def sync(name: str) -> None:
        """Both workers here (one all-reduce of the strategy's own)."""
        del name
        everyone()

    loop = _looper(one, work, lambda index: sync(f"loop-{index}"))

    ours = CheckpointManager(work / "ours", distributed=True, max_to_keep=2)
    theirs_dir = work / "tf" if rank == 0 else Path(tempfile.mkdtemp(prefix="tf-worker-"))
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    theirs = tf.train.CheckpointManager(checkpoint, str(theirs_dir), max_to_keep=2)

    def save(name: str, step_: int, index: int) -> float:
        sync(f"save-{index}-{name}-{step_}")
        start = time.perf_counter()
        if name == "globalstep":
            ours.save(
                step_,
                {"model": model, "optimizer": optimizer, "data": PerRank(data)},
            )
        else:
            theirs.save(checkpoint_number=step_)
        return time.perf_counter() - start

    results = _rounds(args, loop, save, SAVES["tf"])
    ours.close()
    if rank != 0:
        shutil.rmtree(theirs_dir, ignore_errors=True)
    return results


# ------------------------------------------------------------------------------ common


def _looper(one: Any, work: Path, sync: Any) -> Any:
    """The loop contenders of a worker: ``loop(name, n, index)`` runs ``n`` updates of
    ``one()`` (the step, returning the loss) bare or under a Run, from ``sync(index)`` (a
    barrier of both processes), and returns the time per update."""
    from globalstep.run import Run

    def loop(name: str, n: int, index: int) -> float:
        sync(index)
        if name == "plain":
            start = time.perf_counter()
            for _ in range(n):
                one()
            return (time.perf_counter() - start) / n
        with Run(
            work / f"run-{index}", progress=False, handle_signals=True, save_every=None
        ) as run:
            run.restore()
            start = time.perf_counter()
            for _ in range(n):
                run.update(loss=one())
            return (time.perf_counter() - start) / n

    return loop


def _rounds(args: argparse.Namespace, loop: Any, save: Any, savers: tuple[str, ...]) -> dict:
    loops: dict[str, list[float]] = {name: [] for name in LOOPS}
    saves: dict[str, list[float]] = {name: [] for name in savers}
    step = 0
    for index in range(args.rounds):
        order = LOOPS if index % 2 == 0 else LOOPS[::-1]  # neither always first
        for name in order:
            loops[name].append(loop(name, args.n, index))
        times: dict[str, list[float]] = {name: [] for name in savers}
        for _ in range(args.saves):
            for name in savers:
                step += 1
                times[name].append(save(name, step, index))
        for name in savers:
            saves[name].append(statistics.median(times[name]))
    return {"loops": loops, "saves": saves}


def _table(engine: str, results: dict[str, Any]) -> str:
    loops, saves = results["loops"], results["saves"]
    lines = ["| loop | µs per update (median) | spread | x plain |", "|---|---:|---:|---:|"]
    for name in LOOPS:
        values = [t * 1e6 for t in loops[name]]
        ratio = statistics.median(a / b for a, b in zip(loops[name], loops["plain"], strict=True))
        lines.append(
            f"| `{name}` | {statistics.median(values):.0f} | "
            f"{min(values):.0f}-{max(values):.0f} | {ratio:.3f} |"
        )
    own = SAVES[engine][1]
    lines += ["", f"| save | ms per save (median) | spread | x {own} |", "|---|---:|---:|---:|"]
    for name in SAVES[engine]:
        values = [t * 1e3 for t in saves[name]]
        ratio = statistics.median(a / b for a, b in zip(saves[name], saves[own], strict=True))
        lines.append(
            f"| `{name}` | {statistics.median(values):.1f} | "
            f"{min(values):.1f}-{max(values):.1f} | {ratio:.3f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("engine", choices=("jax", "tf"))
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--saves", type=int, default=10)
    parser.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--ports", type=int, nargs=2, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--work", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank is not None:
        out = Path(args.work) / f"result-{args.rank}.json"
        worker = _jax_worker if args.engine == "jax" else _tf_worker
        out.write_text(json.dumps(worker(args, args.rank, out)))
        return
    work = Path(tempfile.mkdtemp(prefix=f"bench-engines-{args.engine}-"))
    extra = ["--port", str(_free_port())]
    if args.engine == "tf":
        extra = ["--ports", str(_free_port()), str(_free_port())]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), "src") if p)
    command = [sys.executable, __file__, args.engine, "--n", str(args.n)]
    command += ["--rounds", str(args.rounds), "--saves", str(args.saves), "--work", str(work)]
    children = [
        subprocess.Popen([*command, *extra, "--rank", str(rank)], env=env) for rank in range(2)
    ]
    codes = [child.wait() for child in children]
    if codes != [0, 0]:
        raise SystemExit(f"the workers exited with {codes}; see their output above")
    results = json.loads((work / "result-0.json").read_text())
    print(_table(args.engine, results))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
