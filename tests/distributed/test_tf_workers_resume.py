"""Issue 37's must-show on TensorFlow: two workers of a MultiWorkerMirroredStrategy (a
Keras model and Adam built in its scope, each worker drawing its own batches from its own
NumPy generator) under a Run that saves on both into one directory.

- SIGKILLed together twice, at random updates (between saves, and at a random moment
  around a save), then restarted: each worker's weights, optimizer state, generator state
  and the logged loss equal an uninterrupted run's, bit for bit.
- One worker SIGKILLed alone: its peer notices within seconds and exits with a clear
  error; the restarted pair resumes exactly.

On main 84cf7b6 the first start fails: ``ConfigError: distributed needs torch.distributed``.
The workers are forked by one zygote per module (it imports TensorFlow once).
"""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

pytest.importorskip("tensorflow")

from tf_spawn import Zygote
from tf_workers import SAVE_EVERY, TOTAL

from globalstep.summary import read_run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def zygote():
    started = Zygote()
    yield started
    started.close()


@pytest.fixture(scope="module")
def reference(zygote, tmp_path_factory):
    """The uninterrupted run: both workers' final state and the logged loss."""
    out = tmp_path_factory.mktemp("reference")
    return zygote.run("train", out), _losses(out)


def _losses(out):
    """The loss curve as the JSONL reader and ``globalstep logs --csv`` show it."""
    logs = out / "run" / "logs"
    jsonl = [(p.step, p.value) for p in read_run(logs).scalars["loss"]]
    csv = subprocess.run(
        [sys.executable, "-m", "globalstep", "logs", str(logs), "--csv", "-"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    header = csv[0].split(",")
    rows = [dict(zip(header, line.split(","), strict=True)) for line in csv[1:]]
    assert [(int(r["step"]), float(r["value"])) for r in rows if r["tag"] == "loss"] == jsonl
    return jsonl


def _assert_same(results, reference):
    expected = reference[0]
    assert [r["step"] for r in expected] == [TOTAL, TOTAL]
    assert expected[0]["weights"] == expected[1]["weights"]  # mirrored: one value
    assert expected[0]["generator"] != expected[1]["generator"]  # each worker its own
    for rank in range(2):
        for key in ("step", "iterations", "weights", "optimizer", "generator", "next_draw"):
            assert results[rank][key] == expected[rank][key], (rank, key)


def test_a_plain_loop_saves_once_and_restores_each_workers_leaves(zygote, tmp_path):
    """CheckpointManager(distributed=True) with follow(optimizer, clock) after
    strategy.run: 5 updates (a checkpoint at 3), then a restart to 8 restores the mirrored
    model, Adam's deferred slots and each worker's PerRank leaf and generator: the same
    as 8 updates at once; the chief alone wrote the replicated state."""
    straight = zygote.run("plain@8", tmp_path / "straight")
    zygote.run("plain@5", tmp_path / "resumed")
    resumed = zygote.run("plain@8", tmp_path / "resumed")
    assert [r["restored"] for r in resumed] == [3, 3]
    assert [r["mine"] for r in straight] == [[8.0, 8.0], [16.0, 16.0]]
    for rank in range(2):
        for key in ("step", "iterations", "weights", "optimizer", "generator", "mine"):
            assert resumed[rank][key] == straight[rank][key], (rank, key)
    newest = sorted((tmp_path / "resumed" / "ckpt").glob("step-*"))[-1]
    assert sorted(p.name for p in newest.iterdir()) == [
        "COMMITTED",
        "arrays.safetensors",
        "per_rank",
        "sharded",
        "state.json",
    ]


def test_killed_together_twice_resumes_bit_for_bit(zygote, reference, tmp_path):
    """Both workers SIGKILLed at a random update between saves, then at a random moment
    around a save, restarted each time: the same state and curve as the uninterrupted run."""
    rng = random.Random()
    first = rng.randrange(2, SAVE_EVERY * 2)
    second = rng.choice(range(SAVE_EVERY, TOTAL - first, SAVE_EVERY))
    print(f"kills at update {first} (between saves), then {second} (around a save)")
    zygote.run(f"train@{first}:before", tmp_path, expect={0: -9, 1: -9})
    # Each worker's timer fires at its own moment: a worker whose peer died first may
    # notice it (a save or a collective failing on it) and exit 1 before its own fires.
    zygote.run(f"train@{second}:save", tmp_path, expect={0: (-9, 1), 1: (-9, 1)})
    assert -9 in zygote.last
    results = zygote.run("train", tmp_path)
    _assert_same(results, reference)
    assert _losses(tmp_path) == reference[1]


def test_one_killed_alone_is_noticed_and_the_pair_resumes(zygote, reference, tmp_path):
    """Worker 1 SIGKILLed alone: worker 0 exits with an error naming the lost peer within
    seconds; both restarted resume exactly."""
    zygote.run("train@6:alone", tmp_path, expect={0: 1, 1: -9})
    error = tmp_path / "train@6:alone-0.error"
    noticed = error.stat().st_mtime - float((tmp_path / "killed.txt").read_text())
    message = error.read_text()
    print(f"worker 0 noticed worker 1's death after {noticed:.2f} s: {message[:300]}")
    assert "task:1" in message or "rank 1" in message
    assert noticed < 30.0  # TensorFlow's heartbeat timeout (10 s), not a save's 600 s
    results = zygote.run("train", tmp_path)
    _assert_same(results, reference)
    assert _losses(tmp_path) == reference[1]
    assert json.dumps(results)  # plain JSON results


@pytest.mark.parametrize("victim", [0, 1])
def test_one_killed_inside_a_save_is_noticed_and_the_pair_resumes(
    zygote, reference, tmp_path, victim
):
    """Worker ``victim`` SIGKILLed inside the save of step 8 (writing its per-rank leaves):
    its peer, waiting for it inside the save, exits with a clear error within seconds
    (not the save's 600 s timeout); nothing of step 8 is committed; both restarted
    resume exactly."""
    scenario = f"train@8:inside{victim}"
    peer = 1 - victim
    zygote.run(scenario, tmp_path, expect={victim: -9, peer: 1})
    error = tmp_path / f"{scenario}-{peer}.error"
    noticed = error.stat().st_mtime - float((tmp_path / "killed.txt").read_text())
    message = error.read_text()
    print(f"worker {peer} noticed worker {victim}'s death in a save after {noticed:.2f} s")
    print(message[:400])
    assert message.startswith("DistributedCheckpointError: the distributed save of step 8")
    if victim == 0:  # the host of the coordination service: its keys are gone
        assert "TensorFlow's coordination service stopped answering" in message
        assert "(rank 0, the chief or else worker 0) has probably died" in message
    else:
        assert "rank(s) [1] died during the save (the process group lost them)" in message
    assert noticed < 10.0
    steps = sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("step-*"))
    assert steps[-1] == "step-000000000004"
    results = zygote.run("train", tmp_path)
    _assert_same(results, reference)
    assert _losses(tmp_path) == reference[1]


def test_sigterm_to_one_worker_stops_both_at_one_saved_step(zygote, reference, tmp_path):
    """SIGTERM to worker 1 alone at its update 6: both agree through the coordination
    service, save one checkpoint at one step (<= 6 + 2 * stop_every, 3, the agreement's
    bound) and exit 143; restarted, they finish as the uninterrupted run."""
    zygote.run("train@6:term", tmp_path, expect={0: 143, 1: 143})
    steps = sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("step-*"))
    stopped = int(steps[-1].removeprefix("step-"))
    print(f"stopped at step {stopped} (checkpoints {steps})")
    assert 6 <= stopped <= 12
    newest = tmp_path / "run" / "checkpoints" / steps[-1]
    assert (newest / "COMMITTED").exists()
    assert sorted(p.name for p in (newest / "per_rank").iterdir()) == [
        "rank-00000.safetensors",
        "rank-00001.safetensors",
    ]
    results = zygote.run("train", tmp_path)
    _assert_same(results, reference)
    assert _losses(tmp_path) == reference[1]
