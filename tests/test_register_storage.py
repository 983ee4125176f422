"""A store of one's own, by the recipe of docs/add-a-store.md (issue 34): the guide itself
runs in tests/test_docs.py (checkpoints and JSONL logs on a dict-backed store); here, the
registration's rules and that an fsspec-less scheme reaches the registered store only."""

from __future__ import annotations

import pytest

from globalstep import ConfigError
from globalstep.storage import (
    _OPENERS,  # the registry, cleaned after each test
    FsspecStorage,
    LocalStorage,
    open_storage,
    register_storage,
)


@pytest.fixture(autouse=True)
def clean_registry():
    before = dict(_OPENERS)
    yield
    _OPENERS.clear()
    _OPENERS.update(before)


class Marked(FsspecStorage):
    """An fsspec store registered under a scheme of its own (the opener's result is used)."""


def test_a_registered_scheme_opens_its_store():
    register_storage("mine", lambda url, options: Marked(url.replace("mine://", "memory://")))
    storage = open_storage("mine://a/b")
    assert isinstance(storage, Marked)
    storage.write_bytes(storage.join("x"), b"1")
    assert open_storage("memory://a/b").read_bytes(open_storage("memory://a/b").join("x")) == b"1"
    assert type(open_storage("memory://a/b")) is FsspecStorage  # other schemes unchanged
    assert type(open_storage("/tmp/x")) is LocalStorage


def test_the_storage_options_reach_the_opener():
    seen = []
    register_storage("opts", lambda url, options: seen.append(options) or Marked("memory://o"))
    open_storage("opts://x", {"key": "k"})
    assert seen == [{"key": "k"}]


@pytest.mark.parametrize(
    ("scheme", "opener", "match"),
    [
        ("My Store", lambda u, o: None, r"`scheme` must be a URL scheme such as 'myblob'"),
        (3, lambda u, o: None, r"`scheme` must be a URL scheme"),
        ("file", lambda u, o: None, r"`scheme` must not be a local directory's scheme"),
        ("ok", "not callable", r"`opener` must be callable as opener\(url, storage_options\)"),
    ],
)
def test_a_bad_registration_is_refused(scheme, opener, match):
    with pytest.raises(ConfigError, match=match):
        register_storage(scheme, opener)


def test_a_scheme_is_registered_once():
    register_storage("once", lambda url, options: Marked("memory://once"))
    with pytest.raises(ConfigError, match=r"`scheme` must be registered once; .* opens it"):
        register_storage("once", lambda url, options: Marked("memory://twice"))
