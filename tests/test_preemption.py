"""Preemption on one process: the signals' checks, the handlers, the local stop, and a
Run's ``stop_signals`` (the agreement over ranks is in tests/distributed/test_preemption_ranks.py).
"""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

from globalstep import CheckpointManager, ConfigError, Run
from globalstep.distributed import (
    DEFAULT_STOP_SIGNALS,
    Preemption,
    check_signals,
    exit_status,
)
from globalstep.run import Ranks


def test_exit_status_is_128_plus_the_signal():
    """The status a shell reports for a process killed by the signal."""
    assert [exit_status(s) for s in DEFAULT_STOP_SIGNALS] == [130, 143, 138]


def test_the_default_stop_signals():
    """SIGINT kept, SIGTERM and SIGUSR1 added."""
    assert DEFAULT_STOP_SIGNALS == (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)


def test_signals_are_kept_once_in_order():
    assert check_signals((15, signal.SIGUSR1, 15)) == (signal.SIGTERM, signal.SIGUSR1)
    assert check_signals([]) == ()


@pytest.mark.parametrize(
    ("signals", "match"),
    [
        ("SIGTERM", r"`stop_signals` must be a tuple of signal numbers"),
        (15, r"`stop_signals` must be a tuple of signal numbers .*; got stop_signals=15"),
        ((signal.SIGTERM, 1.5), r"must hold signal numbers .*; 1.5 is not one"),
        ((True,), r"must hold signal numbers .*; True is not one"),
        ((100000,), r"must hold signals this system knows; 100000 is not one"),
        ((signal.SIGKILL,), r"cannot hold SIGKILL, which no process can catch.*SIGTERM"),
        ((signal.SIGSTOP,), r"cannot hold SIGSTOP"),
    ],
)
def test_bad_signals_are_refused(signals, match):
    with pytest.raises(ConfigError, match=match):
        check_signals(signals, "stop_signals")


@pytest.mark.parametrize(
    ("keywords", "match"),
    [
        ({"every": 0}, r"`every` must be an int >= 1; got every=0"),
        ({"every": True}, r"`every` must be an int >= 1; got every=True"),
        ({"delay": 0}, r"`delay` must be an int >= 1; got delay=0"),
        ({"delay": 1.0}, r"`delay` must be an int >= 1; got delay=1.0"),
        ({"signals": (signal.SIGKILL,)}, r"`signals` cannot hold SIGKILL"),
    ],
)
def test_bad_arguments_are_refused(keywords, match):
    with pytest.raises(ConfigError, match=match):
        Preemption(**keywords)


def test_a_group_without_a_process_group_is_refused():
    with pytest.raises(ConfigError, match=r"`group` needs an initialised default process group"):
        Preemption((), group=object())


def test_signals_off_the_main_thread_are_refused():
    """Only the main thread can have handlers; signals=() works anywhere."""
    errors: list[BaseException] = []

    def make():
        try:
            Preemption((signal.SIGUSR1,))
        except ConfigError as error:
            errors.append(error)
        Preemption(()).close()

    thread = threading.Thread(target=make)
    thread.start()
    thread.join()
    assert len(errors) == 1
    assert "can be caught only by a Preemption made in the main thread" in str(errors[0])


def test_a_signal_stops_one_process_at_once_and_close_gives_the_handler_back():
    """On one process the first signal is the agreed stop; on_signal, then on_stop."""
    before = signal.getsignal(signal.SIGUSR1)
    calls = []
    stop = Preemption(
        (signal.SIGUSR1,),
        on_signal=lambda s: calls.append(("signal", s)),
        on_stop=lambda s: calls.append(("stop", s)),
    )
    assert not stop.distributed
    assert stop.poll() == 0
    os.kill(os.getpid(), signal.SIGUSR1)
    assert stop.poll() == signal.SIGUSR1
    assert (stop.requested, stop.agreed) == (signal.SIGUSR1, signal.SIGUSR1)
    assert calls == [("signal", signal.SIGUSR1), ("stop", signal.SIGUSR1)]
    assert signal.getsignal(signal.SIGUSR1) != before
    stop.close()
    stop.close()
    assert signal.getsignal(signal.SIGUSR1) == before


def test_a_request_stops_like_a_signal_and_the_first_one_counts():
    with Preemption(()) as stop:
        stop.request(signal.SIGUSR1)
        stop.request(signal.SIGTERM)
        assert stop.poll() == signal.SIGUSR1


@pytest.mark.parametrize("signum", [0, -1, "SIGTERM", True])
def test_a_bad_request_is_refused(signum):
    with Preemption(()) as stop, pytest.raises(ConfigError, match=r"`signum` must be an int >= 1"):
        stop.request(signum)


def test_a_second_signal_exits_at_once(tmp_path):
    """A plain loop: the first SIGTERM is noted, a repeat right after it is the same
    delivery (ignored), one after SAME_DELIVERY_SECONDS kills the process by SIGTERM."""
    script = textwrap.dedent(
        """
        import os, signal, time
        from globalstep.distributed._preemption import SAME_DELIVERY_SECONDS, Preemption
        stop = Preemption()
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)  # directly and through torchrun's agent
        print("noted", int(stop.poll()), flush=True)
        time.sleep(SAME_DELIVERY_SECONDS + 0.1)
        os.kill(os.getpid(), signal.SIGTERM)
        print("not reached", flush=True)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert done.stdout == f"noted {int(signal.SIGTERM)}\n"


def test_a_group_of_one_agrees_locally():
    """A gloo group of one needs no agreement: the stop is local and at once."""
    pytest.importorskip("torch")
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        with Preemption(()) as stop:
            assert not stop.distributed
            stop.request()
            assert stop.poll() == signal.SIGTERM
        with Preemption((), group=dist.group.WORLD) as stop:
            assert not stop.distributed
    finally:
        dist.destroy_process_group()


# A Run's stop_signals.


def _run(directory, **keywords):
    return Run(directory, progress=False, stream=io.StringIO(), **keywords)


@pytest.mark.parametrize(
    ("signals", "match"),
    [
        ("SIGTERM", r"`stop_signals` must be a tuple of signal numbers"),
        ((signal.SIGKILL,), r"`stop_signals` cannot hold SIGKILL"),
    ],
)
def test_a_run_refuses_bad_stop_signals_before_taking_the_lock(tmp_path, signals, match):
    with pytest.raises(ConfigError, match=match):
        _run(tmp_path, stop_signals=signals)
    with _run(tmp_path) as run:  # no lock left behind
        run.restore()


def test_ranks_refuse_a_bad_stop_every():
    with pytest.raises(ConfigError, match=r"`stop_every` must be an int >= 1; got stop_every=0"):
        Ranks(stop_every=0)


def _signalled(directory, signals, signum, term):
    """Five updates, the signal, one more update (which must stop)."""
    with _run(directory, stop_signals=signals) as run:
        assert (signal.getsignal(signal.SIGTERM) == term) == (signal.SIGTERM not in signals)
        run.restore({"w": 0.0})
        for _ in range(5):
            run.update()
        os.kill(os.getpid(), signum)
        run.update()
    raise AssertionError("the update after the signal did not stop")


@pytest.mark.parametrize(
    ("signals", "signum", "status"),
    [
        (DEFAULT_STOP_SIGNALS, signal.SIGUSR1, 138),
        ((signal.SIGUSR2,), signal.SIGUSR2, 140),
    ],
)
def test_a_run_stops_on_its_stop_signals(tmp_path, signals, signum, status):
    """SIGUSR1 by default, or the signals given (and then not SIGTERM): the update after
    the signal saves that step and exits with 128 + the signal's number."""
    term = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stopped:
        _signalled(tmp_path, signals, signum, term)
    assert stopped.value.code == status
    with CheckpointManager(tmp_path / "checkpoints", read_only=True) as manager:
        assert manager.steps() == [6]
    assert signal.getsignal(signal.SIGTERM) == term


def test_handle_signals_false_catches_none(tmp_path):
    before = {s: signal.getsignal(s) for s in DEFAULT_STOP_SIGNALS}
    with _run(tmp_path, handle_signals=False) as run:
        assert {s: signal.getsignal(s) for s in DEFAULT_STOP_SIGNALS} == before
        run.restore()


class _Store:
    """A Store for one process standing for the group's (torch's HashStore), whose first
    ``fail`` compare_set calls raise as a Store whose host died does."""

    def __init__(self, fail=0):
        dist = pytest.importorskip("torch.distributed")

        self.store, self.fail = dist.HashStore(), fail

    def compare_set(self, key, expected, desired):
        if self.fail:
            self.fail -= 1
            raise RuntimeError("Connection reset by peer")
        return self.store.compare_set(key, expected, desired)

    def check(self, keys):
        return self.store.check(keys)

    def get(self, key):
        return self.store.get(key)


def _shared(monkeypatch, store):
    from globalstep.distributed import _preemption as preemption

    monkeypatch.setattr(preemption, "_agreement_store", lambda group: (store, "stop"))


def test_a_rank_that_finds_the_request_late_stops_at_once_and_says_so(monkeypatch):
    """Another rank's request names poll 3; this rank looks every 5 polls, finds it at
    poll 5, stops there, and warns that the ranks are not in lockstep."""
    store = _Store()
    store.store.set("stop", "15:3")
    _shared(monkeypatch, store)
    with Preemption((), every=5) as stop:
        assert stop.distributed
        assert [stop.poll() for _ in range(4)] == [0, 0, 0, 0]
        with pytest.warns(UserWarning, match=r"at poll 5, after the poll every rank stops at"):
            assert stop.poll() == signal.SIGTERM


def test_a_request_the_store_refused_is_written_at_the_next_poll(monkeypatch):
    """request() in a signal handler never raises for a Store that failed: the next poll
    writes the request, and the stop comes at the poll it names (the first look after it
    plus one: poll 3)."""
    store = _Store(fail=1)
    _shared(monkeypatch, store)
    with Preemption((), every=1) as stop:
        stop.request(signal.SIGUSR1)
        assert not store.store.check(["stop"])
        assert [stop.poll() for _ in range(3)] == [0, 0, signal.SIGUSR1]
        assert store.store.get("stop") == b"10:3"


def test_the_first_request_wins_over_a_later_one(monkeypatch):
    """A rank whose request comes second adopts the one the Store holds (signal and poll)."""
    store = _Store()
    store.store.set("stop", "15:4")
    _shared(monkeypatch, store)
    with Preemption((), every=1) as stop:
        stop.request(signal.SIGUSR1)
        assert [stop.poll() for _ in range(4)] == [0, 0, 0, signal.SIGTERM]
