"""The process group as one interface (issue 34, point 3): ``globalstep._group``.

The same contract (group_workers.contract: rank, world size, the writer rank, the
collectives, the key-value store and its scopes) holds for the single process, for
torch.distributed on 2 gloo processes, and for a third implementation written here: a test
double whose ranks are threads and whose collectives go through a dict store alone (as a
coordination service's key-value calls would). That double then drives the step
agreement, the pre-emption agreement and a distributed checkpoint save with per-rank
leaves, with no torch in sight: the interface is the seam the next engines plug into.
"""

from __future__ import annotations

import ast
import json
import math
import pathlib
import signal
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest
from group_workers import contract

from globalstep import ConfigError, StepMismatchError, _group
from globalstep.checkpoint import CheckpointManager, DistributedOptions, PerRank
from globalstep.distributed import Preemption, assert_steps_agree, gather_floats, reduce_metrics

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "globalstep"


class ThreadGroup(_group.ProcessGroup):
    """A third implementation: rank ``rank`` of ``world`` threads sharing ``store``.

    Every collective is a round of keys in the store: each rank sets its own value, then
    reads every rank's once all exist.
    """

    def __init__(self, rank: int, world: int, store: _group.DictStore) -> None:
        super().__init__()
        self._rank, self._world, self._store = rank, world, store
        self._round = 0

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def world_size(self) -> int:
        return self._world

    def _exchange(self, value: Any) -> list[Any]:
        self._round += 1
        keys = [f"collective/{self._round}/{r}" for r in range(self._world)]
        self._store.set(keys[self._rank], json.dumps(value))
        while not self._store.check(keys):
            time.sleep(0.001)
        return [json.loads(self._store.get(key)) for key in keys]

    def all_gather_ints(self, values: Sequence[int]) -> list[list[int]]:
        return [[int(v) for v in row] for row in self._exchange([int(v) for v in values])]

    def all_gather_floats(self, values: Sequence[float]) -> list[list[float]]:
        rows = self._exchange([repr(float(v)) for v in values])
        return [[float(v) for v in row] for row in rows]

    def all_reduce_floats(self, values: Sequence[float], op: str) -> list[float]:
        reduce = {"sum": math.fsum, "max": max, "min": min}[op]
        columns = zip(*self.all_gather_floats(values), strict=True)
        return [float(reduce(column)) for column in columns]

    def broadcast_int(self, value: int, src: int) -> int:
        return int(self._exchange(int(value))[src])

    def barrier(self) -> None:
        self._exchange(None)

    def store(self) -> _group.KeyValueStore:
        return self._store


def on_threads(world: int, body: Callable[[ThreadGroup], Any]) -> list[Any]:
    """Runs ``body`` on ``world`` ThreadGroup ranks sharing one store; their results."""
    store = _group.DictStore()
    results: list[Any] = [None] * world

    def rank(r: int) -> None:
        try:
            results[r] = body(ThreadGroup(r, world, store))
        except BaseException as err:  # handed to the test's thread
            results[r] = err

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def check_contract(seen: list[dict[str, Any]], *, connected: bool) -> None:
    """What every implementation answers, rank by rank, for the same calls."""
    world = len(seen)
    assert [s["rank"] for s in seen] == list(range(world))
    for rank, s in enumerate(seen):
        assert s["world"] == world
        assert s["connected"] is connected
        assert s["ints"] == [[r, 10 * r + 1, -(2**62)] for r in range(world)]
        assert s["floats"] == [[repr(r + 0.25), "nan", "-inf"] for r in range(world)]
        assert s["reduced"] == {
            "sum": [sum(r + 1.0 for r in range(world)), sum(-r * 0.5 for r in range(world))],
            "max": [float(world), 0.0],
            "min": [1.0, -(world - 1) * 0.5],
        }
        assert s["broadcast"] == 100 + world - 1
        assert s["writer"] == [r == rank for r in range(world)]
        assert s["writer_error"] == (
            f"`writer_rank` must be a rank below the world size, {world}; got "
            f"writer_rank={world}. The writer must be a rank of the group (0..{world - 1})."
        )
        assert s["restart_tag"] == ""
        assert s["scopes"] == seen[0]["scopes"]
        assert s["scopes"][0] != s["scopes"][1]
        assert s["scopes"][0].startswith("contract/")
        store = s["store"]
        assert store["set"] == "from rank 0"
        assert store["first"] == seen[0]["store"]["first"] == store["won"]
        assert store["first"] in {f"rank {r}" for r in range(world)}
        assert store["count"] == sum(r + 1 for r in range(world))
        assert store["check"] == [True, False]
    assert seen[0]["store"]["deleted"] == [True, False]


def test_the_single_process_keeps_the_contract(monkeypatch):
    """No process group: rank 0 of 1, its own values back, a store in this process."""
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    group = _group.active()
    assert isinstance(group, _group.SingleProcess)
    check_contract([contract(group)], connected=False)


def test_the_thread_double_keeps_the_contract():
    """The test double, 3 ranks on threads, answers as torch's group does."""
    seen = on_threads(3, contract)
    check_contract(seen, connected=True)


@pytest.mark.slow
def test_torch_distributed_keeps_the_contract(tmp_path):
    """torch.distributed, 2 gloo processes, found by active() once initialised."""
    pytest.importorskip("torch")
    from spawn import spawn

    seen = spawn("contract", 2, tmp_path, module="group_workers")
    assert [s["found"] for s in seen] == ["TorchGroup", "TorchGroup"]
    check_contract(seen, connected=True)


def test_the_writer_rank_is_checked_in_one_place_for_every_spelling():
    """DistributedOptions(writer_rank=), Ranks(writer=) and is_writer all say the same rule."""
    from globalstep.run import Ranks

    with pytest.raises(ConfigError, match=r"`writer_rank` must be an int >= 0; got writer_rank=-1"):
        DistributedOptions(writer_rank=-1)
    with pytest.raises(ConfigError, match=r"`writer` must be an int >= 0; got writer=True"):
        Ranks(writer=True)
    with pytest.raises(ConfigError, match=r"`writer_rank` must be a rank below the world size, 2"):
        ThreadGroup(0, 2, _group.DictStore()).is_writer(2)


def test_the_double_drives_the_step_agreement_and_the_reductions():
    """distributed's collectives take a ProcessGroup as their group."""

    def body(group: ThreadGroup) -> Any:
        agreed = assert_steps_agree(7, group)
        reduced = reduce_metrics({"loss": group.rank + 1.0}, op="mean", group=group)
        gathered = gather_floats([group.rank * 2.0], group=group)
        try:
            assert_steps_agree(7 + (group.rank == 1), group)
        except StepMismatchError as err:
            return agreed, reduced, gathered, err.ranks, err.steps
        return agreed, reduced, gathered, None, None

    results = on_threads(3, body)
    assert results == [(7, {"loss": 2.0}, [[0.0], [2.0], [4.0]], [1], [7, 8, 7])] * 3


def test_the_double_drives_the_preemption_agreement():
    """A stop requested on rank 1 of 2 stops both ranks at the same poll, through the
    double's store and one scope each (the same key on both ranks)."""
    store = _group.DictStore()
    ranks = [ThreadGroup(r, 2, store) for r in range(2)]
    stops = [Preemption((), every=2, group=group) for group in ranks]
    assert all(stop.distributed for stop in stops)
    polls: list[list[int]] = [[], []]
    for update in range(1, 9):
        if update == 3:
            stops[1].request(signal.SIGUSR1)
        for r, stop in enumerate(stops):
            polls[r].append(stop.poll())
    assert polls[0] == polls[1] == [0, 0, 0, 0, 0, signal.SIGUSR1, signal.SIGUSR1, signal.SIGUSR1]
    assert store.check(["globalstep/preempt/1"])
    assert store.get("globalstep/preempt/1") == b"10:6"


def test_the_double_drives_a_distributed_save_with_per_rank_leaves(tmp_path):
    """Two managers on the double's ranks save together (the writer commits once the other
    rank wrote its per-rank file) and each restores its own per-rank leaf."""

    def body(group: ThreadGroup) -> Any:
        options = DistributedOptions(group=group, timeout_seconds=30)
        with CheckpointManager(tmp_path, distributed=options) as manager:
            state = {"w": np.arange(3.0), "mine": PerRank(np.full(2, group.rank + 1.0))}
            manager.save(5, state)
            group.barrier()
            template = {"w": np.zeros(3), "mine": PerRank(np.zeros(2))}
            restored = manager.restore(template)
        return restored["w"].tolist(), restored["mine"].value.tolist(), manager.steps()

    results = on_threads(2, body)
    assert results == [([0.0, 1.0, 2.0], [1.0, 1.0], [5]), ([0.0, 1.0, 2.0], [2.0, 2.0], [5])]
    step = tmp_path / "step-000000000005"
    assert sorted(p.name for p in (step / "per_rank").iterdir()) == [
        "rank-00000.safetensors",
        "rank-00001.safetensors",
    ]
    assert json.loads((step / "state.json").read_text())["per_rank"]["world_size"] == 2


class LosingGroup(ThreadGroup):
    """The double whose ranks ``dead`` are lost (as a heartbeat that stopped tells)."""

    def __init__(self, rank: int, world: int, store: _group.DictStore, dead: set[int]) -> None:
        super().__init__(rank, world, store)
        self.dead = dead

    def lost(self, ranks: Sequence[int]) -> list[int]:
        return [r for r in ranks if r in self.dead]


@pytest.mark.parametrize("rank", [0, 1])
def test_a_save_fails_at_once_naming_a_rank_the_group_lost(tmp_path, rank):
    """The other rank died (the group lost it): the writer waiting for its report, or a
    rank waiting for the writer's directory, fails the save within a liveness look (0.5 s),
    not at timeout_seconds, naming it; nothing is committed."""
    from globalstep._errors import DistributedCheckpointError

    group = LosingGroup(rank, 2, _group.DictStore(), dead={1 - rank})
    options = DistributedOptions(group=group, timeout_seconds=600)
    with CheckpointManager(tmp_path, distributed=options) as manager:
        with pytest.raises(DistributedCheckpointError) as caught:
            manager.save(5, {"w": np.arange(3.0), "mine": PerRank(np.ones(1))})
        assert caught.value.ranks == [1 - rank]
        assert (
            f"the distributed save of step 5 failed: rank(s) [{1 - rank}] died during the save "
            "(the process group lost them); nothing was committed"
        ) in str(caught.value)
    assert CheckpointManager(tmp_path, read_only=True).steps() == []


GROUP_CALLS = {
    "get_rank",
    "get_world_size",
    "is_initialized",
    "all_gather",
    "all_reduce",
    "broadcast",
    "barrier",
    "_get_default_store",
}
"""torch.distributed's calls about the process group, which only the _group package makes."""


def test_only_the_group_module_asks_torch_distributed_about_the_group():
    """Outside the _group package (and the framework rooms), no module calls torch.distributed's
    rank, size, collectives or store: a new engine is one implementation, nowhere else."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if relative.startswith("_group/") or relative.startswith("integrations/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in GROUP_CALLS:
                found.append(f"{relative}:{node.lineno} {node.attr}")
    assert found == []


def test_a_run_takes_its_group_from_ranks(tmp_path):
    """``Ranks(group=...)`` hands a Run its process group: the reduction, the step check,
    the stop agreement and the distributed save of both Runs go through the double."""
    from globalstep.run import Ranks, Run

    def body(group: ThreadGroup) -> Any:
        ranks = Ranks(reduce="mean", check_every=1, stop_every=1, group=group)
        with Run(
            tmp_path / "run",
            ranks=ranks,
            progress=False,
            handle_signals=False,
            save_every=2,
            writer_options={"formats": ("jsonl",)},
        ) as run:
            run.restore({"w": np.full(2, 1.0), "mine": PerRank(np.full(1, group.rank + 1.0))})
            for _ in range(4):
                run.update(loss=group.rank + 1.0)
            every_rank_saves = run.checkpoints._rounds.distributed
            checks = run.ranks_check.calls if run.ranks_check is not None else None
        return run.step, every_rank_saves, checks, group._round

    results = on_threads(2, body)
    assert [r[:3] for r in results] == [(4, True, 4)] * 2, results
    assert results[0][3] == results[1][3] > 4  # the double's collectives ran on both ranks
    with CheckpointManager(tmp_path / "run" / "checkpoints", read_only=True) as manager:
        assert manager.steps() == [2, 4]
        restored, _ = manager.restore({"state": {"w": np.zeros(2)}}, partial=True)
    assert restored["state"]["w"].tolist() == [1.0, 1.0]
    per_rank = tmp_path / "run" / "checkpoints" / "step-000000000004" / "per_rank"
    assert sorted(p.name for p in per_rank.iterdir()) == [
        "rank-00000.safetensors",
        "rank-00001.safetensors",
    ]
    rows = [
        json.loads(line)
        for path in sorted((tmp_path / "run").rglob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    assert [row["value"] for row in rows if row.get("tag") == "loss"] == [1.5] * 4, rows


def _engine(name: str) -> _group.Engine:
    """An initialised engine for active()'s choice, whose group is a SingleProcess."""
    return _group.Engine(name, lambda: True, lambda handle: _group.SingleProcess(), f"{name}()")


def test_a_group_name_picks_the_engine_and_several_need_one(monkeypatch):
    """``group="name"`` picks an initialised engine; an unknown name, a name whose engine
    is not initialised, and several engines with no name are refused, saying what to do."""
    with pytest.raises(ConfigError, match=r"`group` names an engine that is not initialised"):
        _group.active("torch")
    with pytest.raises(ConfigError, match=r"`group` must be a process group or one of"):
        _group.active("mpi")
    monkeypatch.setattr(_group, "ENGINES", [_engine("alpha"), _engine("beta")])
    assert _group.initialised()
    assert isinstance(_group.active("beta"), _group.SingleProcess)
    with pytest.raises(
        ConfigError,
        match=r"`group` must name the engine to use where several are initialised "
        r"\(alpha, beta\).*Pass group='alpha'",
    ):
        _group.active()


def test_a_manager_without_any_group_names_every_engine(tmp_path, monkeypatch):
    """distributed=True with no process group says which calls make one."""
    monkeypatch.setattr(
        _group, "ENGINES", [_group.Engine("alpha", lambda: False, _group.active, "alpha.init()")]
    )
    with pytest.raises(
        ConfigError,
        match=r"`distributed` needs a process group initialised on every rank.*"
        r"Call one of alpha.init\(\) before opening the manager",
    ):
        CheckpointManager(tmp_path, distributed=True)


def test_a_rank_that_fails_before_its_part_fails_the_save_at_once(tmp_path):
    """Rank 1's state cannot be saved (its flatten raises before it takes its part): it
    reports its error, and the writer fails the save naming rank 1 and that error rather
    than waiting out timeout_seconds for a report (the message on 705dca0: "did not report
    within timeout_seconds=5"); nothing is committed."""

    def body(group: ThreadGroup) -> Any:
        options = DistributedOptions(group=group, timeout_seconds=5)
        with CheckpointManager(tmp_path, distributed=options) as manager:
            state = {"w": np.arange(3.0), "odd": object() if group.rank == 1 else 1}
            try:
                manager.save(5, state)
            except Exception as err:  # each rank's own error
                return type(err).__name__, str(err)
        return None

    writer, other = on_threads(2, body)
    assert other[0] == "ConfigError", other
    assert writer[0] == "DistributedCheckpointError", writer
    assert "rank 1 failed: ConfigError" in writer[1], writer
    with CheckpointManager(tmp_path, read_only=True) as manager:
        assert manager.steps() == []
