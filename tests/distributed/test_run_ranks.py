"""Tests for Run's behaviour on several ranks that need no process group: the rank comes
from torchrun's environment variables (the multi-process tests are in
test_multiprocess.py)."""

from __future__ import annotations

import io

import pytest

from globalstep import ConfigError, Run
from globalstep.run import Ranks, Rollback


@pytest.fixture
def second_rank(monkeypatch):
    """This process is rank 1 of 2, as torchrun would say before init_process_group."""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")


def test_a_run_on_one_process_writes(tmp_path):
    """Without several ranks the Run is the writer and checks nothing."""
    with Run(tmp_path, progress=False, stream=io.StringIO()) as run:
        assert (run.is_writer, run.ranks, run.ranks_check) == (True, None, None)


def test_several_ranks_use_the_default_ranks(tmp_path, second_rank):
    """On rank 1 of 2 the Run takes Ranks() and is not the writer."""
    with Run(tmp_path, progress=False, stream=io.StringIO()) as run:
        assert (run.is_writer, run.ranks, run.ranks_check.every) == (False, Ranks(), 100)


def test_a_non_writer_rank_writes_nothing(tmp_path, second_rank):
    """Rank 1 prints nothing and saves no checkpoint, logs nothing, shows no progress."""
    stream = io.StringIO()
    with Run(tmp_path, total_steps=3, save_every=1, stream=stream) as run:
        run.restore({"w": 1.0})
        while not run.done:
            run.update(loss=1.0)
    assert stream.getvalue() == ""
    assert list(tmp_path.rglob("*")) == []  # no checkpoint, no log


def test_a_non_writer_rank_restores_the_writers_checkpoint(tmp_path, monkeypatch):
    """A rank other than the writer restores what rank 0 saved."""
    with Run(tmp_path, total_steps=4, progress=False, stream=io.StringIO()) as run:
        run.restore({"w": 1.0})
        while not run.done:
            run.update()
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with Run(tmp_path, total_steps=4, progress=False, stream=io.StringIO()) as run:
        run.restore({"w": 0.0})
        assert run.step == 4


def test_the_writer_is_closed_off_the_writer_rank(tmp_path, second_rank):
    """run.writer on rank 1 raises, saying to guard with run.is_writer."""
    run = Run(tmp_path, progress=False, stream=io.StringIO())
    with pytest.raises(ConfigError, match=r"`writer` is open on the writer rank only"):
        run.writer  # noqa: B018 (the property raises)
    run.close()


def test_rollback_on_several_ranks_needs_a_process_group(tmp_path, second_rank):
    """A Rollback policy on ranks known from WORLD_SIZE alone (no process group to decide
    together through) raises, naming the world size and the fix."""
    with pytest.raises(
        ConfigError,
        match=r"`rollback` needs an initialised process group on several ranks.*"
        r"This run has 2 ranks from WORLD_SIZE but no process group: call one of "
        r"torch.distributed.init_process_group\(...\), jax.distributed.initialize\(...\), "
        r"tf.distribute.MultiWorkerMirroredStrategy\(\) with a TF_CONFIG before making the Run",
    ):
        Run(tmp_path, rollback=Rollback())


def test_a_writer_rank_beyond_the_world_is_refused(tmp_path, second_rank):
    """Ranks(writer=2) with two ranks raises."""
    with pytest.raises(
        ConfigError,
        match=r"`ranks.writer` must be a rank below the world size, 2; got ranks.writer=2",
    ):
        Run(tmp_path, ranks=Ranks(writer=2))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"writer": -1}, r"`writer` must be an int >= 0"),
        ({"reduce": "median"}, r"`reduce` must be one of 'max', 'mean', 'min', 'sum' or None"),
        ({"check_every": 0}, r"`check_every` must be an int >= 1 or None"),
    ],
)
def test_bad_ranks_fields_are_errors(kwargs, match):
    """Each Ranks field is validated, naming the field."""
    with pytest.raises(ConfigError, match=match):
        Ranks(**kwargs)


def test_ranks_must_be_a_ranks(tmp_path):
    """A dict in place of Ranks raises."""
    with pytest.raises(ConfigError, match=r"`ranks` must be a globalstep.run.Ranks"):
        Run(tmp_path, ranks={"writer": 0})  # type: ignore[arg-type]
