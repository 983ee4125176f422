"""One process of a JAX multi-process test: ``python jax_workers.py PORT RANK SIZE OUT S...``.

It calls ``jax.distributed.initialize("127.0.0.1:PORT", SIZE, RANK)`` (a dead peer is
noticed after ``heartbeat_timeout_seconds=5``), then runs each scenario ``S`` in turn (one
start of JAX for several scenarios: the suite starts the engine once per module) and
writes ``OUT/S-RANK.json`` with what it saw; an error is written to ``OUT/S-RANK.error``.
"""

from __future__ import annotations

import json
import random
import sys
import traceback
from pathlib import Path
from typing import Any

import numpy as np

HEARTBEAT_SECONDS = 5


def connect(port: int, rank: int, size: int) -> None:
    import jax

    jax.distributed.initialize(
        f"127.0.0.1:{port}",
        num_processes=size,
        process_id=rank,
        heartbeat_timeout_seconds=HEARTBEAT_SECONDS,
    )


def contract(out: Path) -> dict[str, Any]:
    """The process group's contract (group_workers.contract) on the group active() finds."""
    import jax
    from group_workers import contract as run_contract

    from globalstep import _group

    group = _group.active()
    seen = run_contract(group)
    seen["found"] = type(group).__name__
    seen["jax"] = [jax.process_index(), jax.process_count()]
    seen["named"] = type(_group.active("jax")).__name__
    store = group.store()
    try:
        store.compare_set("k", "old", "new")
    except Exception as err:
        seen["compare_error"] = f"{type(err).__name__}: {err}"
    # Many rounds: each process's round keys are deleted behind it (two at most remain).
    for i in range(50):
        group.all_gather_ints([i])
    group.barrier()
    from globalstep._group._jax import _KEY_ROOT, client

    left = client().key_value_dir_get(f"{_KEY_ROOT}/round/")
    seen["round_keys_left"] = sorted(k for k, _ in left)
    return seen


def checkpoint(out: Path) -> dict[str, Any]:
    """A distributed save with per-rank leaves, and its restore on the same 2 processes."""
    import jax
    import jax.numpy as jnp

    from globalstep import Clock
    from globalstep.checkpoint import CheckpointManager, PerRank

    rank = jax.process_index()
    directory = out / "checkpoint"
    clock = Clock()
    rng = np.random.default_rng(10 + rank)
    py = random.Random(20 + rank)
    key = jax.random.key(30 + rank)

    def tree() -> dict[str, Any]:
        return {
            "clock": clock,
            "w": jnp.arange(4.0),
            "rng": rng,
            "py": py,
            "key": PerRank(key),
            "mine": PerRank(np.full(3, rank, dtype=np.int64)),
        }

    with CheckpointManager(directory, distributed=True) as manager:
        clock.tick(5)
        manager.save(clock, tree())
    expected = {
        "rng": rng.bit_generator.state["state"]["state"],
        "py": py.random(),
        "key": np.asarray(jax.random.key_data(key)).tolist(),
    }
    rng.random(7), py.random()  # moved on: the restore must bring them back
    with CheckpointManager(directory, distributed=True) as manager:
        template = tree()
        template["key"] = PerRank(jax.random.key(0))
        template["mine"] = PerRank(np.zeros(3, dtype=np.int64))
        restored = manager.restore(template)
    return {
        "steps": manager.steps(),
        "expected": {**expected, "rng": str(expected["rng"])},
        "restored": {
            "rng": str(rng.bit_generator.state["state"]["state"]),
            "py": py.random(),
            "key": np.asarray(jax.random.key_data(restored["key"].value)).tolist(),
            "mine": np.asarray(restored["mine"].value).tolist(),
            "w": np.asarray(restored["w"]).tolist(),
            "clock": restored["clock"].step,
        },
    }


def _global(shape: tuple[int, ...], sharding: Any, full: np.ndarray) -> Any:
    import jax

    return jax.make_array_from_callback(shape, sharding, lambda index: full[index])


def _shards(array: Any, full: np.ndarray) -> list[bool]:
    """Whether each shard this process addresses holds ``full``'s values there."""
    return [
        bool(np.array_equal(np.asarray(s.data), full[s.index])) for s in array.addressable_shards
    ]


def sharded(out: Path) -> dict[str, Any]:
    """jax.Arrays across both processes (2 CPU devices each, 4 in all): one sharded on a
    1-D mesh, one sharded on a mesh axis and replicated on the other (each chunk written
    once, by replica 0), saved; restored into templates sharded otherwise."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from globalstep import Clock
    from globalstep.checkpoint import CheckpointManager

    devices = np.array(jax.devices())
    line = Mesh(devices, ("x",))
    grid = Mesh(devices.reshape(2, 2), ("p", "r"))
    full_w = np.arange(8 * 3, dtype=np.float32).reshape(8, 3) * 0.5
    full_v = (np.arange(4 * 8, dtype=np.int32).reshape(4, 8) - 7).astype(jnp.bfloat16)
    state = {
        "clock": Clock(),
        "w": _global((8, 3), NamedSharding(line, P("x")), full_w),
        "v": _global((4, 8), NamedSharding(grid, P("p")), full_v),
    }
    directory = out / "sharded"
    with CheckpointManager(directory, distributed=True) as manager:
        state["clock"].tick(3)
        manager.save(state["clock"], state)
    template = {
        "clock": Clock(),
        "w": _global((8, 3), NamedSharding(grid, P("r", None)), np.zeros_like(full_w)),
        "v": _global((4, 8), NamedSharding(line, P(None, "x")), np.zeros_like(full_v)),
    }
    with CheckpointManager(directory, distributed=True) as manager:
        restored = manager.restore(template)
    w, v = restored["w"], restored["v"]
    return {
        "devices": len(devices),
        "local": len(jax.local_devices()),
        "replicas": [s.replica_id for s in state["v"].addressable_shards],
        "w": {
            "sharding": str(w.sharding.spec) if hasattr(w.sharding, "spec") else str(w.sharding),
            "same": w.sharding == template["w"].sharding,
            "shards": _shards(w, full_w),
            "dtype": str(w.dtype),
        },
        "v": {
            "same": v.sharding == template["v"].sharding,
            "shards": _shards(v, full_v),
            "dtype": str(v.dtype),
        },
        "clock": restored["clock"].step,
        "full_w": full_w.tolist(),
        "full_v": full_v.astype(np.float32).tolist(),
    }


def run_sharded(out: Path) -> dict[str, Any]:
    """A Run whose state holds a jax.Array sharded over both processes, updated under jit:
    4 updates saved every 2; a second Run resumes at 4 and goes on to 6."""
    import jax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from globalstep import Run

    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("x",)), P("x"))
    full = np.arange(8, dtype=np.float32)
    step = jax.jit(lambda w: w * 0.5 + 1.0)
    seen: dict[str, Any] = {}
    for total in (4, 6):
        state = {"w": _global((8,), sharding, full)}
        with Run(out / "run_sharded", total_steps=total, save_every=2, progress=False) as run:
            state = run.restore(state)
            seen[f"start{total}"] = run.step
            while not run.done:
                state = {"w": step(state["w"])}
                run.update(state=state)
        expected = full.copy()
        for _ in range(total):
            expected = expected * 0.5 + 1.0
        seen[f"shards{total}"] = _shards(state["w"], expected)
    return seen


def grow(out: Path) -> dict[str, Any]:
    """A checkpoint of one process (the test's: a jax.Array of 8 floats, the test's w at
    step 2) restored into an array sharded over both processes (1 -> 2)."""
    import jax
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from globalstep import Clock
    from globalstep.checkpoint import CheckpointManager

    sharding = NamedSharding(Mesh(np.array(jax.devices()), ("x",)), P("x"))
    template = {"clock": Clock(), "w": _global((8,), sharding, np.zeros(8, np.float32))}
    with CheckpointManager(out / "single", distributed=True) as manager:
        restored = manager.restore(template)
    w = restored["w"]
    return {
        "step": restored["clock"].step,
        "same": w.sharding == sharding,
        "shards": _shards(w, np.arange(8, dtype=np.float32) * 0.25),
    }


SCENARIOS = {
    "grow": grow,
    "contract": contract,
    "checkpoint": checkpoint,
    "sharded": sharded,
    "run_sharded": run_sharded,
}


def main(port: int, rank: int, size: int, out: Path, scenarios: list[str]) -> None:
    connect(port, rank, size)
    for scenario in scenarios:
        try:
            seen = SCENARIOS[scenario](out)
        except BaseException as err:
            (out / f"{scenario}-{rank}.error").write_text(
                f"{type(err).__name__}: {err}\n{traceback.format_exc()}"
            )
            raise
        (out / f"{scenario}-{rank}.json").write_text(json.dumps(seen))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]), sys.argv[5:])
