"""A JAX process SIGKILLed inside a distributed save, with JAX's default heartbeat timeout
(100 s): its peer notices within seconds through globalstep's own heartbeat on the
coordination service, fails the save naming it, and nothing is committed for that step.

The survivor's *exit* is JAX's: at exit ``jax.distributed`` waits in its shutdown barrier
for the dead process until its own heartbeat timeout, then aborts (SIGABRT); a user who
wants the exit within seconds too passes ``heartbeat_timeout_seconds`` to
``jax.distributed.initialize`` (jax_loop.py's 5 s; see the guide).

Each process in turn is the victim. Process 0 hosts JAX's coordination service: when it
dies JAX itself terminates the survivor at once (SIGABRT); the survivor of process 1's death
is ours to tell, and without the heartbeat it would wait out JAX's 100 s or the save's 90 s.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

pytest.importorskip("jax")

from jax_spawn import finish, start

from globalstep.checkpoint import CheckpointManager

pytestmark = pytest.mark.slow  # two processes started per victim


@pytest.mark.parametrize("victim", [1, 0])
def test_a_process_killed_inside_a_save_is_noticed_within_seconds(tmp_path, victim):
    children = start("jax_live.py", 2, [str(tmp_path), str(victim)], tmp_path / "log")
    deadline = time.monotonic() + 90
    while not (tmp_path / "inside").exists():
        assert time.monotonic() < deadline, "the victim never reached the save"
        assert all(child.poll() is None for child in children), "a process ended early"
        time.sleep(0.05)
    os.kill(children[victim].pid, signal.SIGKILL)
    killed = time.monotonic()
    survivor = 1 - victim
    statuses = finish(children)
    exited = time.monotonic() - killed
    log = (tmp_path / f"log-{survivor}.log").read_text(errors="replace")
    assert statuses[victim] == -signal.SIGKILL
    assert statuses[survivor] != 0, log[-3000:]
    if victim == 1:
        failed = json.loads((tmp_path / "failed-0.json").read_text())
        noticed = failed["at"] - killed  # both clocks are this machine's CLOCK_MONOTONIC
        print(
            f"process 1 killed inside the save: process 0's save failed {noticed:.1f} s "
            f"later, naming it; it exited ({statuses[0]}) after {exited:.1f} s"
        )
        assert statuses[survivor] == 3, log[-3000:]
        assert "rank(s) [1] died during the save" in failed["error"], failed
        assert failed["ranks"] == [1]
        assert noticed < 30, log[-3000:]  # JAX's default heartbeat timeout is 100 s
    else:  # the service's host died: JAX terminates every other process at once
        print(
            f"process 0 killed inside the save: process 1 ended ({statuses[1]}) after "
            f"{exited:.1f} s"
        )
        assert exited < 30, log[-3000:]
    with CheckpointManager(tmp_path / "checkpoints", read_only=True) as manager:
        assert manager.steps() == [1]
