"""Tests for globalstep.summary._log_helpers."""

import logging

import pytest

from globalstep import Clock, ConfigError
from globalstep.summary import log_every_n_steps

LOGGER = logging.getLogger("globalstep.tests.log_helpers")


def _logged_steps(caplog):
    """Returns the steps this module's logger logged."""
    return [r.args[0] for r in caplog.records if r.name == LOGGER.name]


def test_logs_once_per_multiple_of_n(caplog):
    """Repeated calls per step (micro-batches) log once at the start and at each multiple."""
    caplog.set_level(logging.INFO, logger=LOGGER.name)
    clock = Clock()
    for _ in range(30):
        for _ in range(3):
            log_every_n_steps(LOGGER, logging.INFO, 10, "step %d", clock.step, clock=clock)
        clock.tick()
    assert _logged_steps(caplog) == [0, 10, 20]


def test_step_jumping_past_a_multiple_still_logs(caplog):
    """A step that jumps over a multiple of n logs once at the next call."""
    caplog.set_level(logging.INFO, logger=LOGGER.name)
    clock = Clock()
    for _ in range(5):
        log_every_n_steps(LOGGER, logging.INFO, 10, "step %d", clock.step, clock=clock)
        clock.tick(7)
    assert _logged_steps(caplog) == [0, 14, 21]


def test_a_new_clock_of_the_same_name_starts_afresh(caplog):
    """A second run in one process, with a new clock of the same name, logs from its start."""
    caplog.set_level(logging.INFO, logger=LOGGER.name)

    def run() -> None:
        clock = Clock()
        for _ in range(25):
            log_every_n_steps(LOGGER, logging.INFO, 10, "step %d", clock.step, clock=clock)
            clock.tick()

    run()
    run()
    assert _logged_steps(caplog) == [0, 10, 20, 0, 10, 20]


def test_returns_whether_it_logged():
    """The return value says whether the message went out."""
    clock = Clock()
    results = []
    for _ in range(4):
        results.append(log_every_n_steps(LOGGER, logging.DEBUG, 2, "x", clock=clock))
        clock.tick()
    assert results == [True, False, True, False]


@pytest.mark.parametrize(
    ("kwargs", "parameter"),
    [
        ({"n": 0}, "n"),
        ({"n": 2.0}, "n"),
        ({"logger": "root"}, "logger"),
        ({"clock": 5}, "clock"),
    ],
)
def test_bad_arguments(kwargs, parameter):
    """A bad n, logger or clock is refused, naming it."""
    args = {"logger": LOGGER, "n": 2, "clock": Clock(), **kwargs}
    with pytest.raises(ConfigError, match=f"`{parameter}`"):
        log_every_n_steps(args["logger"], logging.INFO, args["n"], "x", clock=args["clock"])
