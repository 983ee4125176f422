"""The shared step counter without torch: on TensorFlow's ParameterServerStrategy (an
in-process cluster of 3 workers and 1 parameter server, the coordinator in this process)
and on a process group's own key-value store.

The seeds' "each step index happens on exactly one task": functions the coordinator
schedules on whichever worker is free each take an index from a counter variable on the
parameter server; every index is taken exactly once, and the counter's state goes through
a checkpoint.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from globalstep import ConfigError, _group
from globalstep.distributed import SharedStepCounter

tf = pytest.importorskip("tensorflow")


def test_each_index_is_taken_by_exactly_one_scheduled_function(tmp_path):
    """200 functions scheduled over 3 workers each take one index: 0..199, each once, from
    a variable on the parameter server; the state saved and restored resumes the count."""
    job = pathlib.Path(__file__).with_name("ps_counter_job.py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, str(job), str(tmp_path)], capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert "/job:ps/" in seen["device"]
    assert sorted(seen["indices"]) == list(range(200))
    assert seen["value"] == 200
    assert seen["coordinator_took"] == 200
    assert seen["restored"] == 201
    assert seen["after_restore"] == [201, 202, 203, 204]


def test_a_float_variable_is_refused():
    with pytest.raises(ConfigError, match=r"`store` must be an integer variable \(tf.int64\)"):
        SharedStepCounter(tf.Variable(0.0), "steps")


def test_a_process_group_or_its_engine_name_gives_its_store(monkeypatch):
    """A ProcessGroup (here the single process's) or an engine's name stands for its
    key-value store: JAX's or TensorFlow's coordination service, no torch needed."""
    single = _group.SingleProcess()
    first = SharedStepCounter(single, "globalstep-test-steps", start=5)
    assert [first.next(), first.next()] == [5, 6]
    assert SharedStepCounter(single, "globalstep-test-steps").value == 7  # the same store
    monkeypatch.setattr(
        _group,
        "ENGINES",
        [_group.Engine("alpha", lambda: True, lambda handle: single, "alpha()")],
    )
    assert SharedStepCounter("alpha", "globalstep-test-steps").next() == 7
    with pytest.raises(ConfigError, match=r"`store` must be a key-value store"):
        SharedStepCounter({}, "steps")
