"""Closing several parts in order (globalstep._closing.close_in_order), as Run and the
writers' exit hook use it."""

from __future__ import annotations

import pytest

from globalstep import ConfigError, SummaryWriteError
from globalstep._closing import close_in_order
from globalstep.summary import SummaryWriter
from globalstep.summary import _writer as writer_module


class Part:
    def __init__(self, name: str, closed: list[str], error: BaseException | None = None):
        self.name, self.closed, self.error = name, closed, error

    def close(self) -> None:
        self.closed.append(self.name)
        if self.error is not None:
            raise self.error


def test_every_part_is_closed_and_the_first_error_raised() -> None:
    closed: list[str] = []
    first, second = OSError("first"), ValueError("second")
    with pytest.raises(OSError, match="first"):
        close_in_order(Part("a", closed, first), None, Part("b", closed, second), Part("c", closed))
    assert closed == ["a", "b", "c"]


def test_an_error_it_does_not_catch_propagates_at_once() -> None:
    closed: list[str] = []
    with pytest.raises(KeyError):
        close_in_order(
            Part("a", closed, KeyError("a")), Part("b", closed), catching=SummaryWriteError
        )
    assert closed == ["a"]


def test_the_exit_hook_closes_every_writer_when_one_fails(tmp_path, monkeypatch) -> None:
    failing = SummaryWriter(tmp_path / "a", formats=("jsonl",))
    other = SummaryWriter(tmp_path / "b", formats=("jsonl",))
    other.scalar("loss", 1.0, step=1)
    real_close = failing.close

    def broken() -> None:
        real_close()
        raise SummaryWriteError("disk gone", str(tmp_path / "a"))

    monkeypatch.setattr(failing, "close", broken)
    monkeypatch.setattr(writer_module, "_OPEN_WRITERS", {failing: None, other: None})
    with pytest.raises(SummaryWriteError, match="disk gone"):
        writer_module._close_open_writers()
    with pytest.raises(ConfigError, match=r"close\(\) was called"):
        other.scalar("loss", 2.0, step=2)  # closed after the first writer's error
    assert (tmp_path / "b" / "metrics.jsonl").read_text().count('"loss"') == 1
