"""Checkpoints on S3 (a local moto server) beside the same cases on local disk."""

import multiprocessing

import numpy as np
import pytest
from ckpt_helpers import assert_tree_equal, make_state

from globalstep import CheckpointError, ConfigError, CorruptCheckpointError
from globalstep.checkpoint import CheckpointManager
from globalstep.storage import FsspecStorage, is_transient, open_storage


class Place:
    """Where a test's checkpoints live: a URL or path, its storage options, its fsspec fs."""

    def __init__(self, url, options, fs, root):
        self.url, self.options, self.fs, self.root = url, options, fs, root

    def manager(self, **kwargs):
        """Opens a CheckpointManager here."""
        return CheckpointManager(self.url, storage_options=self.options, **kwargs)


@pytest.fixture(params=["local", "s3"])
def place(request, tmp_path):
    """A fresh checkpoint directory on local disk, then on the local S3 server."""
    if request.param == "local":
        import fsspec

        root = str(tmp_path / "ckpt")
        return Place(root, None, fsspec.filesystem("file"), root)
    server = request.getfixturevalue("s3_server")
    url = server.new_url()
    return Place(url, server.options, server.fs, url[len("s3://") :])


@pytest.fixture
def s3_place(s3_server):
    """A fresh checkpoint prefix on the local S3 server."""
    url = s3_server.new_url()
    return Place(url, s3_server.options, s3_server.fs, url[len("s3://") :])


def test_save_list_retain_restore(place):
    """Saves list in step order, retention keeps the newest two, and the newest restores."""
    with place.manager(max_to_keep=2) as manager:
        for step in (10, 20, 30):
            manager.save(step, make_state(step))
        assert manager.steps() == [20, 30]
        assert_tree_equal(manager.restore(), make_state(30))
        assert_tree_equal(manager.restore(step=20), make_state(20))
    assert not place.fs.exists(f"{place.root}/step-000000000010")


def test_a_save_makes_few_requests(s3_place, s3_faults):
    """A save with retention makes one listing of the run and asks once for each marker it
    needs (the old step's, the new one's): 12 requests, from 27."""
    with s3_place.manager(max_to_keep=1) as manager:
        manager.save(1, make_state(1))
        manager.save(2, make_state(2))
        s3_faults.clear()
        manager.save(3, make_state(3))
        seen = list(s3_faults.seen)
        assert manager.steps() == [3]
    prefix = s3_place.root.split("/", 1)[1]
    run_listings = [q for m, _, q in seen if m == "GET" and f"prefix={prefix}%2F&" in q]
    heads = [p for m, p, _ in seen if m == "HEAD" and p.endswith("/COMMITTED")]
    puts = [p.rsplit("/", 1)[1] for m, p, _ in seen if m == "PUT"]
    assert len(run_listings) == 1, seen
    assert sorted(heads) == [
        f"/{s3_place.root}/step-000000000002/COMMITTED",
        f"/{s3_place.root}/step-000000000003/COMMITTED",
    ], seen
    assert puts == ["arrays.safetensors", "state.json", "COMMITTED"], seen
    assert len(seen) <= 12, seen


def test_a_leftover_at_the_step_being_saved_goes_first(tmp_path):
    """Where rename is not atomic, a save at a step whose unmarked directory is listed
    (a failed save's leftover) removes that directory's files before it writes its own."""
    import fsspec

    url = "memory://globalstep-tests/leftover"
    fs = fsspec.filesystem("memory")
    with CheckpointManager(url) as manager:
        manager.save(1, make_state(1))
        fs.pipe("/globalstep-tests/leftover/step-000000000002/junk.bin", b"x" * 10)
        manager.save(2, make_state(2))
        assert not fs.exists("/globalstep-tests/leftover/step-000000000002/junk.bin")
        assert manager.steps() == [1, 2]
        assert_tree_equal(manager.restore(), make_state(2))


def test_a_large_state_round_trips(place, monkeypatch):
    """A state past the in-memory staging limit goes through a temporary file, bit for bit."""
    from globalstep.storage import _remote as storage_module

    monkeypatch.setattr(storage_module, "_SPOOL_BYTES", 1 << 20)
    state = {"w": np.random.default_rng(0).random(1 << 19)}  # 4 MiB
    with place.manager() as manager:
        manager.save(1, state)
        assert_tree_equal(manager.restore(), state)


def test_a_second_reader_sees_new_checkpoints(place):
    """A reader with its own file system instance sees a save made after its first listing."""
    options = None if place.options is None else {**place.options, "skip_instance_cache": True}
    with place.manager() as writer:
        writer.save(1, {"v": np.ones(2)})
        reader = CheckpointManager(place.url, read_only=True, storage_options=options)
        assert reader.steps() == [1]
        writer.save(2, {"v": np.full(2, 2.0)})
        assert reader.steps() == [1, 2]
        assert reader.restore()["v"].tolist() == [2.0, 2.0]
        writer.prune(__import__("globalstep").checkpoint.KeepLatest(1))
        assert reader.steps() == [2]
        reader.close()


def test_a_corrupted_object_fails_its_checksum(place):
    """A flipped byte in the array file is named by restore as a checksum failure."""
    with place.manager() as manager:
        manager.save(5, {"w": np.arange(64.0)})
        path = f"{place.root}/step-000000000005/arrays.safetensors"
        data = bytearray(place.fs.cat_file(path))
        data[-3] ^= 0x40
        place.fs.pipe_file(path, bytes(data))
        with pytest.raises(CorruptCheckpointError, match="fails its checksum"):
            manager.restore()


def test_force_replaces_a_checkpoint(place):
    """force=True replaces a committed checkpoint with the new state."""
    with place.manager() as manager:
        manager.save(3, {"v": np.zeros(3)})
        manager.save(3, {"v": np.ones(3)}, force=True)
        assert manager.steps() == [3]
        assert manager.restore()["v"].tolist() == [1.0, 1.0, 1.0]


def test_a_transient_failure_is_retried(s3_place, s3_faults):
    """A 500 answer to the array upload is retried, and the save then succeeds."""
    with s3_place.manager() as manager:
        s3_faults.inject("PUT", "arrays.safetensors", times=2)
        manager.save(1, make_state(1))
        assert s3_faults.injected == 2
        assert manager._storage.retried == 2
        assert_tree_equal(manager.restore(), make_state(1))


def test_a_transient_failure_of_a_read_is_retried(s3_place, s3_faults):
    """A 503 answer to reading the marker is retried, and the restore then succeeds."""
    with s3_place.manager() as manager:
        manager.save(1, make_state(1))
        s3_faults.inject("GET", "COMMITTED", status=503, code="SlowDown")
        assert_tree_equal(manager.restore(), make_state(1))
        assert s3_faults.injected == 1


def test_a_lasting_failure_fails_the_save_and_keeps_the_previous(s3_place, s3_faults):
    """Failures past the attempts fail the save; the previous checkpoint stays the newest."""
    with s3_place.manager() as manager:
        manager.save(1, {"v": np.ones(2)})
        manager._storage.backoff_seconds = 0.001
        s3_faults.inject("PUT", "arrays.safetensors", times=manager._storage.attempts)
        with pytest.raises(CheckpointError, match="saving step-000000000002 failed"):
            manager.save(2, {"v": np.full(2, 2.0)})
        assert manager.steps() == [1]
        assert manager.restore()["v"].tolist() == [1.0, 1.0]


def test_a_permanent_error_is_not_retried(s3_place, s3_faults):
    """A 403 answer is raised at the first attempt, never retried."""
    with s3_place.manager() as manager:
        s3_faults.inject("PUT", "arrays.safetensors", status=403, code="AccessDenied", times=5)
        with pytest.raises(CheckpointError, match="saving step-000000000001 failed"):
            manager.save(1, {"v": np.ones(2)})
        assert s3_faults.injected == 1
        assert manager._storage.retried == 0


def test_a_failed_forced_save_keeps_the_replaced_checkpoint(s3_place, s3_faults):
    """On S3 a forced save that fails while uploading leaves the old checkpoint committed."""
    with s3_place.manager() as manager:
        manager.save(4, {"v": np.zeros(2)})
        s3_faults.inject("PUT", "arrays.safetensors", status=403, code="AccessDenied")
        with pytest.raises(CheckpointError, match="saving step-000000000004 failed"):
            manager.save(4, {"v": np.ones(2)}, force=True)
        assert manager.steps() == [4]
        assert manager.restore()["v"].tolist() == [0.0, 0.0]


def test_a_second_writer_is_locked_out(place):
    """A second writer on the same directory gets LockError naming the holder."""
    from globalstep import LockError

    with place.manager(), pytest.raises(LockError, match="locked by another writer"):
        place.manager()
    place.manager().close()


def test_two_writers_started_together_30_times(place):
    """Two processes opening a writer behind a barrier, 30 times: exactly one holds it."""
    from lock_race import race

    rounds = 30
    context = multiprocessing.get_context("spawn")
    barriers = [context.Barrier(2) for _ in range(3)]
    results = context.Queue()
    workers = [
        context.Process(target=race, args=(place.url, place.options, rounds, *barriers, results))
        for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=300) for _ in workers]
    for worker in workers:
        worker.join()
    for a, b in zip(*outcomes, strict=True):
        assert sorted([a, b]) == ["held", "locked"], (a, b)


def test_is_transient_tells_passing_failures():
    """Timeouts, resets, 500 and 503 are transient; missing files and EIO are not."""
    import errno

    assert is_transient(TimeoutError())
    assert is_transient(ConnectionResetError())
    assert is_transient(OSError(errno.EBUSY, "SlowDown"))
    assert not is_transient(FileNotFoundError(errno.ENOENT, "gone"))
    assert not is_transient(OSError(errno.EIO, "unknown"))
    assert not is_transient(ValueError("no"))


def test_storage_options_on_a_local_path_are_refused(tmp_path):
    """storage_options for a local directory raise ConfigError naming them."""
    with pytest.raises(ConfigError, match="`storage_options` applies to fsspec URLs"):
        CheckpointManager(tmp_path, storage_options={"anon": True})


def test_storage_options_must_be_a_mapping():
    """storage_options that is not a mapping raises ConfigError."""
    with pytest.raises(ConfigError, match="`storage_options` must be a mapping"):
        open_storage("memory://x", storage_options=["anon"])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"attempts": 0}, "`attempts` must be an int >= 1"), ({"backoff_seconds": -1}, "`backoff")],
)
def test_retry_settings_are_checked(kwargs, match):
    """attempts < 1 or a negative backoff raises ConfigError."""
    with pytest.raises(ConfigError, match=match):
        FsspecStorage("memory://globalstep-s3-retry", **kwargs)


@pytest.mark.slow
def test_sigkill_at_random_moments_on_s3(s3_place):
    """After each SIGKILL of a process saving to S3, the newest checkpoint restores exactly."""
    import json
    import random
    import subprocess
    import sys
    import time
    from pathlib import Path

    from ckpt_helpers import state_for_step, subprocess_env

    rng = random.Random(20261201)
    script = str(Path(__file__).parent / "save_loop.py")
    options = json.dumps(s3_place.options)
    newest = []
    uncommitted_seen = 0
    for _ in range(4):
        child = subprocess.Popen(
            [sys.executable, script, s3_place.url, options],
            stdout=subprocess.PIPE,
            env=subprocess_env(),
        )
        assert child.stdout.readline() == b"ready\n"  # the dead holder's lock was taken over
        time.sleep(rng.uniform(0.5, 2.5))
        child.kill()
        child.wait()
        child.stdout.close()
        with s3_place.manager(read_only=True) as manager:
            steps = manager.steps()
            if steps:
                assert_tree_equal(manager.restore(), state_for_step(steps[-1]))
                newest.append(steps[-1])
        names = {p.rsplit("/", 1)[-1] for p in s3_place.fs.ls(s3_place.root, refresh=True)}
        uncommitted_seen += any(n.startswith("step-") and int(n[5:]) not in steps for n in names)
    assert len(newest) >= 2
    assert newest == sorted(newest)
    print(f"newest steps {newest}; kills that left an uncommitted step: {uncommitted_seen}")


def test_a_forced_save_failing_in_its_copy_falls_back_to_the_previous_step(s3_place, s3_faults):
    """On S3 a forced save failing while copied over the old one leaves the step before."""
    with s3_place.manager() as manager:
        manager.save(3, {"v": np.full(2, 3.0)})
        manager.save(4, {"v": np.zeros(2)})
        # Only the copy into step-4's own prefix fails (the staged upload goes elsewhere).
        s3_faults.inject("PUT", "step-000000000004/arrays", status=403, code="AccessDenied")
        with pytest.raises(CheckpointError, match="saving step-000000000004 failed"):
            manager.save(4, {"v": np.ones(2)}, force=True)
        assert manager.steps() == [3]
        assert manager.restore()["v"].tolist() == [3.0, 3.0]


def test_retries_used_up_raise_an_oserror_naming_the_action():
    """A transient non-OSError (botocore's) still failing after the attempts is an OSError."""

    class HTTPClientError(Exception):
        pass

    HTTPClientError.__module__ = "botocore.exceptions"
    storage = FsspecStorage("memory://globalstep-s3-used-up", attempts=2, backoff_seconds=0)

    def fail():
        raise HTTPClientError("connection dropped")

    assert is_transient(HTTPClientError())
    with pytest.raises(OSError, match="reading x failed 2 times, the last with HTTPClientError"):
        storage.retry("reading x", fail)
    assert storage.retried == 1


def test_s3_without_s3fs_names_the_extra(monkeypatch):
    """An s3:// directory without s3fs raises MissingDependencyError naming the s3 extra."""
    import sys

    import fsspec  # noqa: F401 - loads fsspec.registry

    from globalstep import MissingDependencyError

    monkeypatch.setitem(sys.modules, "s3fs", None)  # import s3fs now raises ImportError
    for protocol in ("s3", "s3a"):  # fsspec's cache of file system classes already loaded
        monkeypatch.delitem(sys.modules["fsspec.registry"]._registry, protocol, raising=False)
    with pytest.raises(MissingDependencyError, match=r"pip install 'globalstep\[s3\]'"):
        CheckpointManager("s3://globalstep-no-s3fs/run")
