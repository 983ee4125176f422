"""Tests for globalstep.checkpoint.storage."""

import os

import pytest

from globalstep import ConfigError, LockError
from globalstep.checkpoint.storage import (
    DirectoryLock,
    FsspecStorage,
    LocalStorage,
    open_storage,
)


def test_local_paths_and_file_urls_are_local(tmp_path):
    """Plain paths and file:// URLs open local storage with atomic rename."""
    for directory in (tmp_path, str(tmp_path), f"file://{tmp_path}"):
        storage = open_storage(directory)
        assert isinstance(storage, LocalStorage)
        assert storage.atomic_rename
        assert storage.root == str(tmp_path)


def test_urls_open_fsspec_storage():
    """Other URLs open fsspec storage, whose rename is not atomic."""
    storage = open_storage("memory://globalstep-storage/a")
    assert isinstance(storage, FsspecStorage)
    assert not storage.atomic_rename


@pytest.mark.parametrize("directory", [None, 3, ""])
def test_bad_directories_are_refused(directory):
    """A directory that is no path raises a ConfigError naming `directory`."""
    with pytest.raises(ConfigError, match="`directory` must be"):
        open_storage(directory)


def test_exchange_swaps_directories(tmp_path):
    """exchange() swaps two directories in one step."""
    storage = open_storage(tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x").write_text("a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "x").write_text("b")
    assert storage.exchange(str(tmp_path / "a"), str(tmp_path / "b"))
    assert (tmp_path / "b" / "x").read_text() == "a"
    assert (tmp_path / "a" / "x").read_text() == "b"


def test_writer_refuses_an_existing_file(tmp_path):
    """open_writer never overwrites: the file must be new."""
    storage = open_storage(tmp_path)
    storage.write_bytes(str(tmp_path / "f"), b"1")
    with pytest.raises(FileExistsError):
        storage.open_writer(str(tmp_path / "f"))


def test_fsspec_listing_and_removal():
    """fsspec storage lists, sizes and removes like local storage."""
    storage = open_storage("memory://globalstep-storage/b")
    storage.makedirs(storage.join("d"))
    storage.write_bytes(storage.join("d", "f"), b"abc")
    assert storage.listdir(storage.root) == ["d"]
    assert storage.size(storage.join("d", "f")) == 3
    storage.remove_tree(storage.join("d"))
    assert storage.listdir(storage.root) == []
    assert storage.listdir(storage.join("none")) == []


def test_lock_names_holder_and_releases(tmp_path):
    """A held lock refuses a second holder, naming the first; release frees it."""
    first = DirectoryLock(open_storage(tmp_path))
    first.acquire()
    with pytest.raises(LockError, match=f"pid {os.getpid()} on "):
        DirectoryLock(open_storage(tmp_path)).acquire()
    first.release()
    first.release()
    second = DirectoryLock(open_storage(tmp_path))
    second.acquire()
    assert second.took_over is None
    second.release()


def test_remote_stale_lock_of_dead_pid_is_taken_over():
    """On fsspec storage a lock whose holder process is gone is taken over."""
    storage = open_storage("memory://globalstep-storage/c")
    storage.makedirs(storage.root)
    dead = f'{{"pid": 999999999, "host": "{os.uname().nodename}", "since": "then"}}'
    storage.write_bytes(storage.join(".lock"), dead.encode())
    lock = DirectoryLock(storage)
    lock.acquire()
    assert lock.took_over == f"pid 999999999 on {os.uname().nodename} since then"
    lock.release()
    assert not storage.exists(storage.join(".lock"))


def test_remote_lock_with_garbage_is_refused():
    """An unreadable remote lock is never taken over silently."""
    storage = open_storage("memory://globalstep-storage/d")
    storage.makedirs(storage.root)
    storage.write_bytes(storage.join(".lock"), b"\xff garbage")
    with pytest.raises(LockError, match="locked by another writer"):
        DirectoryLock(storage).acquire()
