"""TensorFlow's multi-worker run as globalstep's process group (issue 37): the TFGroup
contract on two real workers (a MultiWorkerMirroredStrategy on 127.0.0.1 ports), a dead
worker noticed by its peer, a one-process TensorFlow user left on SingleProcess, and the
private TensorFlow calls it relies on pinned.

The workers are forked by one zygote per module (it imports TensorFlow once).
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

pytest.importorskip("tensorflow")

from tf_spawn import Zygote

from globalstep import ConfigError


@pytest.fixture(scope="module")
def zygote():
    started = Zygote()
    yield started
    started.close()


@pytest.fixture(scope="module")
def group(zygote, tmp_path_factory):
    """Two workers through the contract; then rank 1 is SIGKILLed and rank 0 waits on it."""
    return zygote.run("group", tmp_path_factory.mktemp("group"), expect={1: -9})


pytestmark = pytest.mark.slow


def test_rank_and_world_size_are_tensorflows_task_ids(group):
    """Worker i is rank i of 2 and the same group object serves group='tensorflow'."""
    assert [(r["type"], r["rank"], r["world_size"], r["same"]) for r in group] == [
        ("TFGroup", 0, 2, True),
        ("TFGroup", 1, 2, True),
    ]
    assert [r["writer"] for r in group] == [True, False]


def test_gathers_are_bit_for_bit(group):
    """Floats (subnormals, -0.0, inf) and int64 extremes come back exactly, on both ranks."""
    floats = [
        [v.hex() for v in [0.1 * (rank + 1), -0.0, float("inf"), 1e-310, 2.0**-1074 * (rank + 1)]]
        for rank in range(2)
    ]
    ints = [[rank, -(2**63) + rank, 2**63 - 1 - rank] for rank in range(2)]
    for result in group:
        assert result["floats"] == floats
        assert result["ints"] == ints


def test_reduce_and_broadcast_agree(group):
    """sum, max and min are element-wise and the same on both ranks; a broadcast gives src's."""
    for result in group:
        assert result["sum"] == [0.1 + 0.2, 1.0]
        assert result["max"] == [1.0, -0.0]
        assert result["min"] == [0.0, -1.0]
        assert result["broadcast"] == 101


def test_compare_set_on_a_missing_key_has_one_winner(group):
    """compare_set(key, "", value): both ranks get the first writer's value."""
    winners = {result["first"] for result in group} | {r["first_after"] for r in group}
    assert len(winners) == 1
    assert winners <= {"rank0", "rank1"}


def test_set_overwrites_and_check_does_not_wait(group):
    """set replaces a value; check is False for a missing key, True once seen."""
    for result in group:
        assert result["get"] == "b"
        assert result["check_missing"] is False
        assert result["check_present"] is True


def test_add_hands_each_value_to_one_rank(group):
    """200 adds of 1 on each rank at once: 400 distinct results, the total 400."""
    adds = group[0]["adds"] + group[1]["adds"]
    assert sorted(adds) == list(range(1, 401))
    assert [r["add_total"] for r in group] == [400, 400]
    for result in group:
        assert result["adds"] == sorted(result["adds"])


def test_the_shared_step_counter_needs_no_torch(group):
    """SharedStepCounter on globalstep.distributed.store() (the coordination service): 50
    indices taken on each worker at once, each once, from the start; a restore on one
    worker sets the next for both."""
    assert [r["public_store"] for r in group] == [True, True]
    assert sorted(group[0]["counter"] + group[1]["counter"]) == list(range(10, 110))
    assert [r["counter_value"] for r in group] == [110, 110]
    restored = group[0]["counter_restored"] + group[1]["counter_restored"]
    assert sorted(restored) == list(range(1000, 1006))


def test_compare_set_of_a_value_has_one_winner(group):
    """compare_set(key, "b", ...) on both ranks: one wins, both read the winner's value."""
    assert group[0]["cas_after"] == group[1]["cas_after"] in {"c0", "c1"}
    assert {group[0]["cas"], group[1]["cas"]} == {group[0]["cas_after"]}


def test_delete_key(group):
    """delete_key says the key existed and removes it for every rank."""
    assert group[0]["delete"] is True
    assert [r["deleted"] for r in group] == [False, False]


def test_a_look_for_a_missing_key_makes_no_round_trip(group):
    """check() of a key nobody set (Preemption's per-update look) answers from the key's
    watching thread: far below a round trip to the service, which a gather makes."""
    for result in group:
        print(
            f"rank {result['rank']}: check {result['check_seconds'] * 1e6:.1f} us, "
            f"all_gather_ints {result['gather_seconds'] * 1e3:.2f} ms"
        )
        assert result["check_seconds"] < result["gather_seconds"]


def test_a_dead_peer_is_noticed_at_once(group):
    """Rank 1 SIGKILLed: rank 0, waiting in a collective, raises PeerLostError naming it
    within a second (the probe of TensorFlow's own health check), not at a timeout."""
    assert [r["lost_alive"] for r in group] == [[], []]
    survivor = group[0]
    assert survivor["noticed_ranks"] == [1]
    assert survivor["lost_dead"] == [1]
    assert "rank 1 of the TensorFlow run (/job:worker/replica:0/task:1) died" in survivor["noticed"]
    print(f"rank 1's death noticed by rank 0 after {survivor['noticed_seconds']:.2f} s")
    assert survivor["noticed_seconds"] < 10.0  # the coordination service's heartbeat bound


def test_one_process_tensorflow_stays_single_process(zygote, tmp_path):
    """A TensorFlow user on one process (MirroredStrategy, or MultiWorkerMirroredStrategy
    without TF_CONFIG) keeps SingleProcess."""
    (result,) = zygote.run("single", tmp_path, size=1)
    assert result == {
        "plain": "SingleProcess",
        "mirrored": "SingleProcess",
        "multiworker_alone": "SingleProcess",
        "initialised": False,
    }


def test_initialised_never_imports_tensorflow():
    """Asking whether a process group exists imports no TensorFlow."""
    code = (
        "import sys, globalstep._group as g\n"
        "assert not g.initialised() and type(g.active()).__name__ == 'SingleProcess'\n"
        "loaded = ('tensorflow', 'globalstep._group._tensorflow')\n"
        "assert not [m for m in sys.modules if m.startswith(loaded)]\n"
        "print(g.engine_names())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "('torch', 'jax', 'tensorflow')"


def test_the_private_tensorflow_calls_exist():
    """The eager context's calls the group makes exist in the installed TensorFlow (a
    TensorFlow that drops one fails here, not in a user's run)."""
    from tensorflow.python.eager import context
    from tensorflow.python.framework import errors_impl

    from globalstep._group import _tensorflow as tf_group

    for name in tf_group._CONTEXT_CALLS:
        assert callable(getattr(context.context(), name)), name
    assert hasattr(context, "_context")
    assert hasattr(context.context(), "_collective_ops_server_def")
    for error in ("AlreadyExistsError", "DeadlineExceededError", "UnavailableError"):
        assert issubclass(getattr(errors_impl, error), Exception)


def test_a_missing_call_is_a_config_error(monkeypatch):
    """A TensorFlow without one of the calls: ConfigError naming it."""
    from tensorflow.python.eager import context

    from globalstep._group import _tensorflow as tf_group

    monkeypatch.setattr(tf_group, "tf_initialised", lambda: True)
    monkeypatch.delattr(type(context.context()), "check_collective_ops_peer_health")
    with pytest.raises(ConfigError, match="check_collective_ops_peer_health missing"):
        tf_group._context()


def test_group_tensorflow_without_a_run_is_a_config_error():
    """group='tensorflow' where no multi-worker run was started: ConfigError."""
    from globalstep import _group

    with pytest.raises(ConfigError, match="names an engine that is not initialised"):
        _group.active("tensorflow")


def test_two_then_one_then_two_workers_draw_each_row_once(zygote, tmp_path):
    """2 -> 1 -> 2 workers mid-epoch with ResumableOrder: each worker draws its share of
    the epoch's one order (its rows through tf.gather), a checkpoint holds every worker's
    position, and a restore on another number of workers splits the rest of the epoch
    over the new ones: every row of the epoch drawn exactly once across the attempts."""
    drawn: Counter[int] = Counter()
    counts = []
    for size, batches in ((2, "2"), (1, "3"), (2, "rest")):
        results = zygote.run(f"data@{size}:{batches}", tmp_path, size=size)
        counts.append([len(result["drawn"]) for result in results])
        for result in results:
            drawn.update(result["drawn"])
    assert counts == [[6, 6], [9], [8, 8]]
    assert [result["epoch"] for result in results] == [1, 1]  # the epoch ended on both
    assert drawn == Counter(range(37))


def test_a_nan_on_one_worker_rolls_both_back_together(zygote, tmp_path):
    """Rollback on 2 TF workers decides on every worker's loss, as on torch: worker 1's
    NaN (worker 0's loss finite there) rolls both back to step 20 at the same update, both
    skip the same batches, and both end with the bytes of a run that never drew them."""
    nan = zygote.run("rollback@nan", tmp_path)
    reference = zygote.run("rollback@reference", tmp_path)
    for result in nan:
        assert len(result["rolled"]) == 1, nan
        rolled = result["rolled"][0]
        assert (rolled["step"], rolled["restored"]) == (23, 20), rolled
        assert rolled["data_position"] == 26, rolled
    assert nan[1]["rolled"][0]["own_loss"] == "nan"
    assert nan[0]["rolled"][0]["own_loss"] != "nan"  # worker 0 alone would not roll back
    drawn = [*range(24), *range(26, 46)]
    assert [result["drawn"] for result in nan] == [drawn, drawn]
    assert [result["step"] for result in nan] == [40, 40]
    for key in ("weights", "optimizer"):
        assert nan[0][key] == nan[1][key] == reference[0][key] == reference[1][key], key
