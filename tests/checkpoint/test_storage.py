"""Tests for globalstep.checkpoint.storage."""

import os

import pytest

from globalstep import CheckpointError, ConfigError, LockError
from globalstep.storage import (
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


def test_failed_local_release_still_frees_the_lock(tmp_path, monkeypatch):
    """A release whose truncation fails raises, yet closes the file and frees the lock."""
    first = DirectoryLock(open_storage(tmp_path))
    first.acquire()

    def fail(fd, length):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "ftruncate", fail)
    with pytest.raises(OSError, match="Input/output error"):
        first.release()
    monkeypatch.undo()
    second = DirectoryLock(open_storage(tmp_path))
    second.acquire()
    second.release()


def test_failed_local_acquire_leaves_no_lock_held(tmp_path, monkeypatch):
    """An acquire that cannot record its holder raises and leaves the lock free."""

    def fail(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(CheckpointError, match=r"no space left on the device of .* free space"):
        DirectoryLock(open_storage(tmp_path)).acquire()
    monkeypatch.undo()
    lock = DirectoryLock(open_storage(tmp_path))
    lock.acquire()
    lock.release()


def test_remote_second_release_keeps_the_next_holders_lock():
    """Releasing a remote lock twice never deletes the lock of the writer that came next."""
    storage = open_storage("memory://globalstep-storage/e")
    first = DirectoryLock(storage)
    first.acquire()
    first.release()
    second = DirectoryLock(storage)
    second.acquire()
    first.release()
    assert storage.exists(storage.join(".lock"))
    with pytest.raises(LockError, match="locked by another writer"):
        DirectoryLock(storage).acquire()
    second.release()
    assert not storage.exists(storage.join(".lock"))


def test_remote_replace_file_never_leaves_the_file_missing(monkeypatch):
    """Where rename is not atomic a failed replacement does not delete the old file first."""
    storage = open_storage("memory://globalstep-storage/f")
    storage.makedirs(storage.root)
    path = storage.join("index")
    storage.write_bytes(path, b"old")
    storage.replace_file(path, b"new")
    assert storage.read_bytes(path) == b"new"

    def fail(self, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(FsspecStorage, "open_writer", fail)
    with pytest.raises(OSError, match="No space left"):
        storage.replace_file(path, b"newer")
    monkeypatch.undo()
    assert storage.read_bytes(path) == b"new"


def test_local_listing_of_a_missing_directory_is_empty(tmp_path):
    """Listing a directory that does not exist gives no names rather than an error."""
    assert LocalStorage(str(tmp_path)).listdir(str(tmp_path / "none")) == []


def test_local_exchange_of_a_missing_path_raises(tmp_path):
    """A failed atomic exchange raises the OSError naming the destination."""
    storage = LocalStorage(str(tmp_path))
    (tmp_path / "b").mkdir()
    with pytest.raises(FileNotFoundError, match="No such file"):
        storage.exchange(str(tmp_path / "a"), str(tmp_path / "b"))


def test_remove_tree_removes_a_plain_file(tmp_path):
    """remove_tree on a file removes it; on a missing path it does nothing."""
    storage = LocalStorage(str(tmp_path))
    (tmp_path / "f").write_bytes(b"x")
    storage.remove_tree(str(tmp_path / "f"))
    storage.remove_tree(str(tmp_path / "f"))
    assert not (tmp_path / "f").exists()


def test_fsspec_rename_moves_a_directory():
    """fsspec storage renames (not atomically) a directory with its files."""
    storage = open_storage("memory://globalstep-storage/g")
    storage.write_bytes(storage.join("a", "f"), b"x")
    storage.rename(storage.join("a"), storage.join("b"))
    assert storage.listdir(storage.root) == ["b"]
    assert storage.read_bytes(storage.join("b", "f")) == b"x"
