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


SCENARIOS = {"contract": contract, "checkpoint": checkpoint}


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
