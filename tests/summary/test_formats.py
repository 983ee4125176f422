"""The writer's formats have one owner, ``summary/_formats.py`` (issue 34): every name the
writer takes is in its registry, and a name outside it is refused wherever it arrives,
never written as JSONL."""

from __future__ import annotations

import pytest

from globalstep import ConfigError
from globalstep.summary import FORMATS, SummaryWriter, Tracker, available_formats
from globalstep.summary._formats import available, backend_for, check_formats, format_of
from globalstep.summary._queue import open_backends


def test_the_registry_holds_every_file_format_once():
    assert FORMATS == ("tensorboard", "jsonl")
    assert [format_of(name).name for name in FORMATS] == list(FORMATS)
    assert available_formats() == available()
    assert set(available()) <= set(FORMATS)
    assert format_of(Tracker("mlflow")) is None


def test_each_format_says_what_it_does():
    tensorboard, jsonl = format_of("tensorboard"), format_of("jsonl")
    assert (tensorboard.float32, tensorboard.remote) == (True, False)
    assert (jsonl.float32, jsonl.remote) == (False, True)
    assert "tensorboard" in tensorboard.needs


@pytest.mark.parametrize("name", ["parquet", "JSONL", ""])
def test_an_unknown_name_is_refused_where_it_arrives(tmp_path, name):
    with pytest.raises(ConfigError, match=r"`formats` must name formats from .*'jsonl'"):
        format_of(name)
    with pytest.raises(ConfigError, match=r"`formats` must name formats"):
        backend_for(name, str(tmp_path), None)
    with pytest.raises(ConfigError, match=r"`formats` must name formats"):
        open_backends(str(tmp_path), ("jsonl", name), None, None)  # not JSONL by default
    with pytest.raises(ConfigError, match=r"`formats` must name each of"):
        check_formats(("jsonl", name))


def test_the_writer_opens_what_the_registry_opens(tmp_path):
    with SummaryWriter(tmp_path, formats=("jsonl",)) as writer:
        writer.scalar("loss", 1.0, step=1)
    assert (tmp_path / "metrics.jsonl").exists()
    assert not list(tmp_path.glob("events.out.tfevents.*"))


def test_only_formats_that_reach_urls_are_taken_for_one():
    with pytest.raises(ConfigError, match=r"must be \('jsonl',\) for an fsspec URL"):
        SummaryWriter("memory://formats-test", formats=("tensorboard", "jsonl"))
    with pytest.raises(ConfigError, match=r"must be \('jsonl',\) for an fsspec URL"):
        SummaryWriter("memory://formats-test", formats=("jsonl", "mlflow"))
