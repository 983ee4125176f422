"""A rank's sign of life (``globalstep._group._heartbeat``) and what a waiting rank makes of
it: a counter a daemon thread adds to every half second, and a peer that calls a rank lost
only when its counter stood still for ``SILENT_SECONDS`` of the peer's own clock.

In process, on a dict store (the thread's beat made fast); the heartbeat on torch.distributed
between processes, and a save failing on a dead rank within seconds, are
tests/distributed/test_liveness.py's.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from typing import Any

import numpy as np
import pytest
import xxhash

from globalstep import _group
from globalstep._group import _heartbeat
from globalstep._group._heartbeat import SILENT_SECONDS, Heartbeat, Watch


@pytest.fixture
def fast(monkeypatch):
    """Beats every 10 ms."""
    monkeypatch.setattr(_heartbeat, "BEAT_SECONDS", 0.01)


def _count(store: _group.DictStore, key: str) -> int:
    return store.add(key, 0)


def _wait_until(condition: Any) -> None:
    while not condition():
        time.sleep(0.005)


def test_a_heartbeat_beats_until_stopped(fast):
    """The thread adds 1 to its counter at each beat; once stopped the counter stands."""
    store, heartbeat = _group.DictStore(), Heartbeat()
    heartbeat.start("alive/0", lambda: store, lambda: True)
    _wait_until(lambda: _count(store, "alive/0") >= 3)
    assert heartbeat.beating
    heartbeat.stop()
    assert not heartbeat.beating
    stood = _count(store, "alive/0")
    time.sleep(0.05)
    assert _count(store, "alive/0") == stood


def test_start_is_idempotent_and_a_failing_store_is_called_once(fast):
    """A second start on the same key keeps the one thread; a store that fails a call is
    not called again (its host died: every call would fail, and torch logs each)."""
    calls = []

    class Gone:
        def add(self, key: str, amount: int) -> int:
            calls.append(key)
            raise RuntimeError("Connection reset by peer")

    heartbeat = Heartbeat()
    heartbeat.start("alive/1", Gone, lambda: True)
    thread = heartbeat._thread
    _wait_until(lambda: calls)
    heartbeat.start("alive/1", Gone, lambda: True)
    time.sleep(0.05)
    assert heartbeat._thread is thread
    assert heartbeat.beating
    assert calls == ["alive/1"]
    heartbeat.stop()


def test_the_heartbeat_ends_with_the_group_and_starts_again(fast):
    """The thread ends once ``alive()`` is false (the group was destroyed); a later start
    (a new group) beats again."""
    store, heartbeat, alive = _group.DictStore(), Heartbeat(), [True]
    heartbeat.start("alive/0", lambda: store, lambda: alive[0])
    _wait_until(lambda: _count(store, "alive/0") >= 1)
    alive[0] = False
    _wait_until(lambda: not heartbeat.beating)
    stood = _count(store, "alive/0")
    alive[0] = True
    heartbeat.start("alive/0", lambda: store, lambda: alive[0])
    _wait_until(lambda: _count(store, "alive/0") > stood)
    heartbeat.stop()


def test_a_peer_calls_a_rank_lost_only_when_its_counter_stood_still():
    """By the reader's own clock: a counter that moves is alive however rarely it is
    read; one that stood still for SILENT_SECONDS since first read is lost; one never
    written (0: its heartbeat not started yet) never is."""
    watch = Watch()
    assert not watch.silent("a", 5, now=100.0)  # first read
    assert not watch.silent("a", 5, now=100.0 + SILENT_SECONDS - 0.01)
    assert watch.silent("a", 5, now=100.0 + SILENT_SECONDS)
    assert not watch.silent("a", 6, now=100.0 + 60 * SILENT_SECONDS)  # it moved: alive
    assert watch.silent("a", 6, now=100.0 + 61 * SILENT_SECONDS)
    assert not watch.silent("never", 0, now=0.0)
    assert not watch.silent("never", 0, now=1e9)


# JAX warns at every fork once it was imported (by an earlier test of this pytest worker);
# the child here runs no JAX.
@pytest.mark.filterwarnings("ignore:os.fork\\(\\) was called:RuntimeWarning")
def test_a_forked_child_has_no_heartbeat_and_forgets_what_it_saw(fast):
    """A child forked from a rank (a data loader's worker) is not the rank: it starts
    without the parent's thread, and without the parent's readings."""
    store = _group.DictStore()
    _heartbeat.HEARTBEAT.start("alive/test-fork", lambda: store, lambda: True)
    _heartbeat.WATCH.silent("alive/peer", 3, now=0.0)
    try:
        read, write = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads: 3.12+
            pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            seen = {
                "beating": _heartbeat.HEARTBEAT.beating,
                "silent": _heartbeat.WATCH.silent("alive/peer", 3, now=1e9),
            }
            os.write(write, json.dumps(seen).encode())
            os._exit(0)
        os.close(write)
        child = json.loads(os.read(read, 1000))
        os.close(read)
        os.waitpid(pid, 0)
    finally:
        _heartbeat.HEARTBEAT.stop()
        _heartbeat.WATCH.forget()
    assert child == {"beating": False, "silent": False}


def test_each_torchrun_restart_beats_on_keys_of_its_own(monkeypatch):
    """A torchrun restart (the agent's Store outlives the workers) beats under its own
    restart tag: the previous start's still counters are not the new ranks'."""
    group = _group.TorchGroup()
    assert group._alive_key(3) == "globalstep/alive/3"
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    assert group._alive_key(3) == "globalstep/alive/job.2/3"


def test_one_rank_loses_nobody_and_keeps_no_heartbeat():
    """On a group of one rank nothing is lost and no thread is started."""
    dist = pytest.importorskip("torch.distributed")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        group = _group.active()
        group.keep_alive()
        assert group.lost([0]) == []
        assert not _heartbeat.HEARTBEAT.beating
    finally:
        dist.destroy_process_group()
    assert _group.TorchGroup().lost([1]) == []  # no group at all


def test_a_large_chunk_is_hashed_in_pieces_to_the_same_digest(monkeypatch):
    """A chunk larger than a piece is hashed a piece at a time (the heartbeat thread gets
    in between), to the digest one call gives."""
    from globalstep.checkpoint._ranks import shards

    monkeypatch.setattr(shards, "_PIECE", 1000)
    for size in (0, 999, 1000, 1001, 12345):
        data = memoryview(np.random.default_rng(size).integers(0, 255, size, dtype=np.uint8))
        assert shards._digest(data) == xxhash.xxh3_64_hexdigest(data), size
