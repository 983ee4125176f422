"""JAX's multi-process runtime as globalstep's process group (issue 37, JAX).

Two processes on 127.0.0.1 call ``jax.distributed.initialize`` once for the module and run
every scenario of jax_workers.py in turn: the process group's contract (the same
group_workers.contract torch's group and the single process pass), and a distributed
CheckpointManager whose per-rank leaves (NumPy and Python generators, a JAX PRNG key, a
``PerRank`` array) go back to the process that saved them. On main 84cf7b6 both fail:
``active()`` finds no JAX engine (the contract runs on the single process) and the
manager raises ``ConfigError: distributed needs a process group initialised``.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

pytest.importorskip("jax")

from jax_spawn import finish, start

from globalstep import _group

SIZE = 2
SCENARIOS = ["contract", "checkpoint", "sharded", "run_sharded", "grow"]


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    """Every scenario's results, indexed by rank: one start of the 2 processes."""
    out = tmp_path_factory.mktemp("jax")
    import jax.numpy as jnp

    from globalstep import Clock
    from globalstep.checkpoint import CheckpointManager

    clock = Clock()
    clock.tick(2)
    with CheckpointManager(out / "single") as manager:  # one process's, for "grow"
        manager.save(clock, {"clock": clock, "w": jnp.arange(8, dtype=jnp.float32) * 0.25})
    devices = "--xla_force_host_platform_device_count=2"  # 2 CPU devices per process
    args = [str(out), *SCENARIOS]
    statuses = finish(start("jax_workers.py", SIZE, args, out / "log", XLA_FLAGS=devices))
    errors = [p.read_text() for p in sorted(out.glob("*.error"))]
    logs = [p.read_text()[-3000:] for p in sorted(out.glob("log-*.log"))]
    assert statuses == [0] * SIZE, (statuses, errors, logs)
    assert not errors, errors
    seen = {
        s: [json.loads((out / f"{s}-{r}.json").read_text()) for r in range(SIZE)] for s in SCENARIOS
    }
    seen["directory"] = out  # type: ignore[assignment]
    return seen


@pytest.mark.slow
def test_the_contract_holds_on_jax_distributed(seen: dict[str, Any]) -> None:
    for rank, got in enumerate(seen["contract"]):
        assert got["found"] == got["named"] == "JaxGroup"
        assert got["jax"] == [rank, SIZE] == [got["rank"], got["world"]]
        assert got["connected"] is True
        assert got["ints"] == [[r, 10 * r + 1, -(2**62)] for r in range(SIZE)]
        assert got["floats"] == [[repr(r + 0.25), "nan", "-inf"] for r in range(SIZE)]
        assert got["reduced"] == {"sum": [3.0, -0.5], "max": [2.0, 0.0], "min": [1.0, -0.5]}
        assert got["broadcast"] == 100 + SIZE - 1
        assert got["writer"] == [r == rank for r in range(SIZE)]
        assert "must be a rank below the world size, 2" in got["writer_error"]
        assert got["restart_tag"] == ""
        assert got["scopes"] == ["contract/1", "contract/2"]
        store = got["store"]
        assert store["set"] == "from rank 0"
        assert store["count"] == 3
        assert store["first"] in ("rank 0", "rank 1")
        assert store["check"] == [True, False]
        assert "must be '' on JAX's coordination service" in got["compare_error"]
        assert len(got["round_keys_left"]) <= 2 * SIZE, got["round_keys_left"]
    assert len({got["store"]["first"] for got in seen["contract"]}) == 1
    assert seen["contract"][0]["store"]["deleted"] == [True, False]
    won = [got["store"]["won"] for got in seen["contract"]]
    assert won == [seen["contract"][0]["store"]["first"]] * SIZE


@pytest.mark.slow
def test_each_process_gets_its_own_per_rank_leaves_back(seen: dict[str, Any]) -> None:
    keys = []
    for rank, got in enumerate(seen["checkpoint"]):
        assert got["steps"] == [5]
        restored, expected = got["restored"], got["expected"]
        assert restored["rng"] == expected["rng"]
        assert restored["py"] == expected["py"]
        assert restored["key"] == expected["key"]
        assert restored["mine"] == [rank] * 3
        assert restored["w"] == [0.0, 1.0, 2.0, 3.0]
        assert restored["clock"] == 5
        keys.append(restored["key"])
    assert keys[0] != keys[1]


def test_the_engine_is_found_without_importing_jax() -> None:
    engine = next(e for e in _group.ENGINES if e.name == "jax")
    assert engine.how == "jax.distributed.initialize(...)"
    if "jax._src.distributed" not in sys.modules:  # nothing imported to ask
        assert engine.initialised() is False
        assert "jax._src.distributed" not in sys.modules
    assert engine.initialised() is False  # imported, but not initialised here


def test_the_private_coordination_api_globalstep_relies_on_is_there() -> None:
    """Pins jax._src.distributed.global_state.client's class and the methods called on it:
    a JAX that moves them fails here, not in a user's save."""
    import inspect

    import jax._src.distributed as distributed
    from jax._src.lib import _jax

    from globalstep._group._jax import CLIENT_METHODS

    assert hasattr(distributed.global_state, "client")
    assert {"process_id", "num_processes"} <= set(dir(distributed.global_state))
    for name in CLIENT_METHODS:
        assert callable(getattr(_jax.DistributedRuntimeClient, name)), name
    doc = _jax.DistributedRuntimeClient.key_value_set_bytes.__doc__ or ""
    assert "allow_overwrite" in doc, doc
    assert "increment" in (_jax.DistributedRuntimeClient.key_value_increment.__doc__ or "")
    assert "heartbeat_timeout_seconds" in inspect.signature(distributed.initialize).parameters


def test_a_missing_or_drifted_client_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import jax._src.distributed as distributed

    from globalstep import ConfigError
    from globalstep._group._jax import JaxGroup

    with pytest.raises(ConfigError, match=r"needs jax.distributed.initialize\(...\) to have run"):
        _ = JaxGroup().rank
    with pytest.raises(ConfigError, match="names an engine that is not initialised"):
        _group.active("jax")
    monkeypatch.setattr(distributed.global_state, "client", object())
    assert isinstance(_group.active(), JaxGroup)  # found: the client exists
    with pytest.raises(ConfigError, match="blocking_key_value_get_bytes, key_value_set_bytes"):
        _group.active().store()


@pytest.mark.slow
def test_sharded_arrays_across_processes_are_written_once_and_restored_resharded(
    seen: dict[str, Any],
) -> None:
    """Each process writes the shards it addresses (replica 0 only); each reads back the
    parts of its template's shards, sharded otherwise than saved; one process without a
    template reads the arrays whole (2 processes -> 1)."""
    import numpy as np

    from globalstep.checkpoint import CheckpointManager

    for got in seen["sharded"]:
        assert got["devices"] == 4
        assert got["local"] == 2
        assert sorted(got["replicas"]) == [0, 1]  # v is replicated on the grid's "r" axis
        assert got["w"]["same"] is True
        assert got["v"]["same"] is True
        assert got["w"]["shards"] == [True, True]
        assert got["v"]["shards"] == [True, True]
        assert got["w"]["dtype"] == "float32"
        assert got["v"]["dtype"] == "bfloat16"
        assert got["clock"] == 3
    directory = seen["directory"] / "sharded"
    reader = CheckpointManager(directory, read_only=True)
    import json as json_module

    document = json_module.loads((directory / "step-000000000003" / "state.json").read_text())
    tensors = document["sharded"]["tensors"]
    assert tensors["v"]["array"] == "jax"
    assert tensors["v"]["dtype"] == "bfloat16"
    assert len(tensors["v"]["chunks"]) == 2  # 4 shards, 2 of them replicas: written once
    assert len(tensors["w"]["chunks"]) == 4
    whole = reader.restore()
    full = seen["sharded"][0]
    np.testing.assert_array_equal(whole["w"], np.array(full["full_w"], dtype=np.float32))
    np.testing.assert_array_equal(whole["v"].astype(np.float32), np.array(full["full_v"]))
    # Into a template of this one process (a jax.Array on its one device).
    import jax
    import jax.numpy as jnp

    from globalstep import Clock

    template = {"clock": Clock(), "w": jnp.ones((8, 3)), "v": jnp.ones((4, 8), jnp.bfloat16)}
    restored = reader.restore(template)
    assert isinstance(restored["w"], jax.Array)
    assert restored["v"].dtype == jnp.bfloat16
    assert restored["w"].sharding == template["w"].sharding
    np.testing.assert_array_equal(restored["w"], whole["w"])
    np.testing.assert_array_equal(np.asarray(restored["v"]), whole["v"])
    assert restored["clock"].step == 3


@pytest.mark.slow
def test_a_run_saves_and_resumes_sharded_arrays_across_processes(seen: dict[str, Any]) -> None:
    for got in seen["run_sharded"]:
        assert got["start4"] == 0
        assert got["start6"] == 4
        assert got["shards4"] == [True, True]
        assert got["shards6"] == [True, True]  # resumed from step 4's shards
    steps = sorted(p.name for p in (seen["directory"] / "run_sharded" / "checkpoints").iterdir())
    assert [s for s in steps if s.startswith("step-")] == [
        "step-000000000002",
        "step-000000000004",
        "step-000000000006",
    ]


@pytest.mark.slow
def test_per_rank_leaves_of_two_jax_processes_restored_on_one(seen: dict[str, Any]) -> None:
    """2 -> 1 process, as on torch: the generators re-seeded with one WorldSizeWarning; a
    PerRank array or JAX key (no way to choose whose) a WorldSizeError naming it."""
    import random

    import jax
    import numpy as np

    from globalstep import Clock, WorldSizeError, WorldSizeWarning
    from globalstep.checkpoint import CheckpointManager, PerRank

    reader = CheckpointManager(seen["directory"] / "checkpoint", read_only=True)
    template = {
        "clock": Clock(),
        "w": np.zeros(4),
        "rng": np.random.default_rng(0),
        "py": random.Random(0),
        "key": PerRank(jax.random.key(0)),
        "mine": PerRank(np.zeros(3, dtype=np.int64)),
    }
    # A JAX PRNG key is immutable: it cannot be re-seeded in place as a NumPy generator
    # is, so a key held per process is refused too (the message says what to do).
    for name in ("key", "mine"):
        with pytest.raises(WorldSizeError, match=f"per-rank leaf '{name}'"):
            reader.restore(template)
        del template[name]
    with pytest.warns(WorldSizeWarning, match=r"\(2 -> 1\)") as warned:
        restored, _ = reader.restore(template, partial=True)
    assert len(warned) == 1
    assert restored["clock"].step == 5
    saved = [got["expected"]["rng"] for got in seen["checkpoint"]]
    assert str(template["rng"].bit_generator.state["state"]["state"]) not in saved


@pytest.mark.slow
def test_one_process_checkpoint_restores_into_arrays_sharded_over_two(
    seen: dict[str, Any],
) -> None:
    for got in seen["grow"]:
        assert got["step"] == 2
        assert got["same"] is True
        assert got["shards"] == [True, True]
